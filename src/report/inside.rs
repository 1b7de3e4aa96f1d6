//! Reading what a session folder holds, and nothing else. A bundle is shared with strangers:
//! a file reached through a symbolic link (`runs/001/comfyui.log` -> `/etc/shadow`, a `runs`
//! folder that links elsewhere) or something that is not a plain file (a FIFO that would
//! block, a device that never ends) is named and left out, never read. Logs are read with
//! bounded memory: the head and the tail, the middle counted and cut.

use std::fmt;
use std::io::Read;
use std::path::{Component, Path};

/// Why a path under the folder was left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Skipped {
    /// It, or a folder on the way to it, is a symbolic link.
    Link,
    /// It is not a plain file (a FIFO, a socket, a device, a folder).
    NotAFile,
    /// It is not there, or could not be read.
    Unreadable(String),
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skipped::Link => {
                f.write_str("is a symbolic link (a bundle holds only files inside the folder)")
            }
            Skipped::NotAFile => f.write_str("is not a plain file"),
            Skipped::Unreadable(why) => write!(f, "cannot be read: {why}"),
        }
    }
}

impl Skipped {
    /// Whether the user should hear of it: a missing file is no news.
    pub(crate) fn worth_saying(&self) -> bool {
        !matches!(self, Skipped::Unreadable(_))
    }
}

/// Checks that `path` (below `root`) is a plain file reached through no link.
pub(crate) fn check(root: &Path, path: &Path) -> Result<(), Skipped> {
    let rel = path.strip_prefix(root).map_err(|_| Skipped::Link)?;
    let mut at = root.to_path_buf();
    for c in rel.components() {
        match c {
            Component::Normal(name) => at.push(name),
            // `..` or an absolute part would leave the folder.
            _ => return Err(Skipped::Link),
        }
        let meta =
            std::fs::symlink_metadata(&at).map_err(|e| Skipped::Unreadable(e.to_string()))?;
        if meta.file_type().is_symlink() {
            return Err(Skipped::Link);
        }
        if at.as_path() == path && !meta.file_type().is_file() {
            return Err(Skipped::NotAFile);
        }
    }
    Ok(())
}

/// Whether `dir` (below `root`) is a folder reached through no link.
pub(crate) fn is_dir(root: &Path, dir: &Path) -> bool {
    let Ok(rel) = dir.strip_prefix(root) else {
        return false;
    };
    let mut at = root.to_path_buf();
    for c in rel.components() {
        let Component::Normal(name) = c else {
            return false;
        };
        at.push(name);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_dir() => {}
            _ => return false,
        }
    }
    true
}

/// Opens a checked file; on Unix without following a link put there in between, and without
/// waiting on a FIFO.
fn open(root: &Path, path: &Path) -> Result<std::fs::File, Skipped> {
    check(root, path)?;
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = o.open(path).map_err(|e| match e.raw_os_error() {
        #[cfg(unix)]
        Some(libc::ELOOP) => Skipped::Link,
        _ => Skipped::Unreadable(e.to_string()),
    })?;
    match file.metadata() {
        Ok(m) if m.is_file() => Ok(file),
        Ok(_) => Err(Skipped::NotAFile),
        Err(e) => Err(Skipped::Unreadable(e.to_string())),
    }
}

/// The whole file, when it is no bigger than `max` bytes (a JSON record, a history).
pub(crate) fn read(root: &Path, path: &Path, max: u64) -> Result<Vec<u8>, Skipped> {
    let file = open(root, path)?;
    let mut out = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut out)
        .map_err(|e| Skipped::Unreadable(e.to_string()))?;
    if out.len() as u64 > max {
        return Err(Skipped::Unreadable(format!(
            "it is over {}",
            crate::text::bytes(max as i64)
        )));
    }
    Ok(out)
}

/// A JSON file of the folder as `T` (`None` when it is missing, left out, or not a `T`).
pub(crate) fn json<T: serde::de::DeserializeOwned>(root: &Path, path: &Path) -> Option<T> {
    serde_json::from_slice(&read(root, path, MAX_JSON).ok()?).ok()
}

/// The most a JSON file of a session is read for (records and histories are kilobytes).
pub(crate) const MAX_JSON: u64 = 64 << 20;

/// Files of the folder left out of a bundle: the path inside the folder, and why.
pub(crate) type LeftOut = Vec<(String, Skipped)>;

/// A log as read: its start, its end, and how many lines between them were left out (`None`:
/// the whole log is `head`).
#[derive(Debug)]
pub(crate) struct LogEnds {
    pub head: Vec<u8>,
    pub tail: Vec<u8>,
    pub cut: Option<usize>,
}

/// A log's first `head` and last `tail` bytes (cut at line ends), and how many lines of the
/// middle were left out; the middle is counted as it streams by, never held.
pub(crate) fn read_log(
    root: &Path,
    path: &Path,
    head: usize,
    tail: usize,
) -> Result<LogEnds, Skipped> {
    let file = open(root, path)?;
    let unreadable = |e: std::io::Error| Skipped::Unreadable(e.to_string());
    let len = file.metadata().map_err(unreadable)?.len();
    // As long as it was: a log still being written is not followed.
    read_log_from(file.take(len), head, tail).map_err(unreadable)
}

/// Bytes past `head + tail` a log may have and still be kept whole.
const SLACK: usize = 4096;

/// What [`read_log`] keeps of any reader (a file, standard input): memory for the head and
/// the tail only.
pub(crate) fn read_log_from(
    mut reader: impl Read,
    head: usize,
    tail: usize,
) -> std::io::Result<LogEnds> {
    let mut first = Vec::new();
    (&mut reader).take(head as u64).read_to_end(&mut first)?;
    // The rest, its last `tail + SLACK` bytes kept, the lines of what goes by counted.
    let cap = tail + SLACK;
    let mut rest: std::collections::VecDeque<u8> = std::collections::VecDeque::new();
    let (mut passed, mut passed_lines) = (0u64, 0usize);
    let mut buf = vec![0; 1 << 16];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        rest.extend(&buf[..n]);
        if rest.len() > cap {
            let drop = rest.len() - cap;
            passed_lines += rest.range(..drop).filter(|&&b| b == b'\n').count();
            rest.drain(..drop);
            passed += drop as u64;
        }
    }
    let total = first.len() as u64 + passed + rest.len() as u64;
    if total <= (head + tail + SLACK) as u64 {
        // Nothing went by (that takes more than `head + cap` bytes): all of it is here.
        first.extend(rest);
        return Ok(LogEnds {
            head: first,
            tail: Vec::new(),
            cut: None,
        });
    }
    let rest: Vec<u8> = rest.into();
    let split = rest.len() - tail;
    let mut cut = passed_lines + rest[..split].iter().filter(|&&b| b == b'\n').count();
    // Whole lines only: what is after the head's last line end counts as the middle's.
    let keep = first
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(head, |i| i + 1);
    first.truncate(keep);
    let mut last = rest[split..].to_vec();
    // From the first line start on; the partial line before it is counted with the middle.
    if let Some(i) = last.iter().position(|&b| b == b'\n') {
        cut += 1;
        last.drain(..=i);
    }
    Ok(LogEnds {
        head: first,
        tail: last,
        cut: Some(cut),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_anywhere_on_the_way_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("session");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("runs/001")).unwrap();
        std::fs::create_dir_all(outside.join("002")).unwrap();
        std::fs::write(outside.join("secret"), "root:x:0:0\n").unwrap();
        std::fs::write(outside.join("002/comfyui.log"), "secret\n").unwrap();
        std::fs::write(root.join("runs/001/record.json"), "{}").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::symlink;
            symlink(outside.join("secret"), root.join("runs/001/comfyui.log")).unwrap();
            symlink(outside.join("002"), root.join("runs/002")).unwrap();
            symlink(&outside, root.join("linked")).unwrap();
            let log = root.join("runs/001/comfyui.log");
            assert_eq!(check(&root, &log), Err(Skipped::Link));
            assert_eq!(read(&root, &log, 100), Err(Skipped::Link));
            let via_dir = root.join("runs/002/comfyui.log");
            assert_eq!(read(&root, &via_dir, 100), Err(Skipped::Link));
            assert!(!is_dir(&root, &root.join("runs/002")));
            assert!(!is_dir(&root, &root.join("linked")));
        }
        assert!(is_dir(&root, &root.join("runs/001")));
        let record = root.join("runs/001/record.json");
        assert_eq!(read(&root, &record, 100).unwrap(), b"{}");
        assert_eq!(check(&root, &root.join("runs/001")), Err(Skipped::NotAFile));
        assert_eq!(check(&root, &outside.join("secret")), Err(Skipped::Link));
        assert!(read(&root, &record, 1).is_err(), "over the limit");
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_waiting() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("comfyui.log");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(read(tmp.path(), &fifo, 100), Err(Skipped::NotAFile));
        assert_eq!(
            read_log(tmp.path(), &fifo, 10, 10).unwrap_err(),
            Skipped::NotAFile
        );
    }

    #[test]
    fn a_long_log_keeps_its_ends_and_counts_the_middle() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("comfyui.log");
        let text: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        let LogEnds { head, tail, cut } = read_log(tmp.path(), &path, 1000, 2000).unwrap();
        let (head, tail) = (
            String::from_utf8(head).unwrap(),
            String::from_utf8(tail).unwrap(),
        );
        assert!(head.starts_with("line 0\n") && head.ends_with('\n'));
        assert!(tail.ends_with("line 99999\n"));
        let kept = head.lines().count() + tail.lines().count();
        assert_eq!(kept + cut.unwrap(), 100_000);
        // Nothing is lost or doubled at the seams.
        let first_tail: usize = tail.lines().next().unwrap()[5..].parse().unwrap();
        assert_eq!(first_tail, 100_000 - tail.lines().count());

        let LogEnds {
            head: all,
            tail: rest,
            cut,
        } = read_log(tmp.path(), &path, 1 << 20, 1 << 20).unwrap();
        assert_eq!((all.len(), rest.len(), cut), (text.len(), 0, None));
    }

    /// Standard input: a reader that gives a few bytes at a time keeps what the file does.
    #[test]
    fn a_log_read_from_a_stream_keeps_what_the_file_keeps() {
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(self.0.len()).min(7);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("comfyui.log");
        let text: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        for (head, tail) in [(1000, 2000), (100_000, 100_000), (0, 500), (1 << 20, 0)] {
            let file = read_log(tmp.path(), &path, head, tail).unwrap();
            let stream = read_log_from(Trickle(text.as_bytes()), head, tail).unwrap();
            assert_eq!(
                (stream.head, stream.tail, stream.cut),
                (file.head, file.tail, file.cut),
                "{head} {tail}"
            );
        }
    }
}
