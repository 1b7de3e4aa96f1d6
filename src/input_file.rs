//! Files the user names as input (a workflow, a launcher, a snapshot): read only when they are
//! plain files, never past a size that such a file can have, and in the encodings Windows
//! editors write. `/dev/zero`, a FIFO with no writer or a 1.5 GiB file given by mistake gets
//! one line saying so, before anything is read (a FIFO is not even waited on).

use crate::error::{Error, io_reason};
use std::borrow::Cow;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Why an input file was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InputError {
    /// The system refused to open or read it.
    #[error("cannot read {what} {}: {}", path.display(), io_reason(source))]
    Read {
        what: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A folder, a device, a FIFO, a socket.
    #[error("the {what} {} is {kind}, not a file", path.display())]
    NotAFile {
        what: String,
        path: PathBuf,
        kind: &'static str,
    },
    /// Larger than such a file can be.
    #[error(
        "the {what} {} is {}, more than a {what} can be ({} at most)",
        path.display(),
        crate::text::bytes(*len as i64),
        crate::text::bytes(*max as i64)
    )]
    TooBig {
        what: String,
        path: PathBuf,
        len: u64,
        max: u64,
    },
}

impl From<InputError> for Error {
    fn from(e: InputError) -> Error {
        let message = e.to_string();
        match e {
            InputError::Read { source, .. } => Error::from_io(message, &source),
            InputError::NotAFile { what, .. } => {
                Error::usage(message).hint(format!("give the {what} file itself, saved on disk"))
            }
            InputError::TooBig { what, .. } => {
                Error::usage(message).hint(format!("check that this is the {what} file you meant"))
            }
        }
    }
}

type Result<T> = std::result::Result<T, InputError>;

/// The error of a failed read of `path`.
fn failed(what: &str, path: &Path) -> impl Fn(std::io::Error) -> InputError {
    move |source| InputError::Read {
        what: what.to_string(),
        path: path.to_path_buf(),
        source,
    }
}

/// The largest workflow read (an API workflow is kilobytes; one with images inlined a few
/// MiB).
pub(crate) const MAX_WORKFLOW: u64 = 64 << 20;
/// The largest launcher script read.
pub(crate) const MAX_SCRIPT: u64 = 1 << 20;

/// Reads the file `path`, a `what` ("workflow", "launcher"), of at most `max` bytes.
pub(crate) fn read(path: &Path, what: &str, max: u64) -> Result<Vec<u8>> {
    let file = open(path, what, max)?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(failed(what, path))?;
    if bytes.len() as u64 > max {
        return Err(too_big(path, what, bytes.len() as u64, max));
    }
    Ok(bytes)
}

/// The first `n` bytes of a plain file (fewer when it is shorter), to tell what it is.
pub(crate) fn head(path: &Path, what: &str, n: usize) -> Result<Vec<u8>> {
    let file = open(path, what, u64::MAX)?;
    let mut out = Vec::with_capacity(n);
    file.take(n as u64)
        .read_to_end(&mut out)
        .map_err(failed(what, path))?;
    Ok(out)
}

/// Opens a plain file of at most `max` bytes, checked before it is opened and again once
/// open (what was checked may have been swapped); never waits on a FIFO.
fn open(path: &Path, what: &str, max: u64) -> Result<std::fs::File> {
    let failed = failed(what, path);
    let meta = std::fs::metadata(path).map_err(&failed)?;
    plain(path, what, &meta, max)?;
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NONBLOCK);
    }
    let file = o.open(path).map_err(&failed)?;
    plain(path, what, &file.metadata().map_err(&failed)?, max)?;
    Ok(file)
}

/// Refuses what is not a plain file of a sane size.
fn plain(path: &Path, what: &str, meta: &std::fs::Metadata, max: u64) -> Result<()> {
    let kind = kind_of(&meta.file_type());
    if let Some(kind) = kind {
        return Err(InputError::NotAFile {
            what: what.to_string(),
            path: path.to_path_buf(),
            kind,
        });
    }
    if meta.len() > max {
        return Err(too_big(path, what, meta.len(), max));
    }
    Ok(())
}

fn too_big(path: &Path, what: &str, len: u64, max: u64) -> InputError {
    InputError::TooBig {
        what: what.to_string(),
        path: path.to_path_buf(),
        len,
        max,
    }
}

/// What a non-file is, in words (`None` for a plain file).
fn kind_of(t: &std::fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        return None;
    }
    if t.is_dir() {
        return Some("a folder");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Some("a named pipe (FIFO)");
        }
        if t.is_char_device() || t.is_block_device() {
            return Some("a device");
        }
        if t.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a plain file")
}

/// Text as Windows editors save it: UTF-8 with or without a byte-order mark (Notepad), or
/// UTF-16 (PowerShell's `>` redirection writes UTF-16LE with a BOM). Invalid sequences become
/// U+FFFD, as for any file read here.
pub(crate) fn decode(bytes: &[u8]) -> Cow<'_, str> {
    if let Some(rest) = bytes.strip_prefix(&[0xEF, 0xBB, 0xBF]) {
        return String::from_utf8_lossy(rest);
    }
    let utf16 = |rest: &[u8], le: bool| {
        let units = rest.chunks_exact(2).map(|c| match le {
            true => u16::from_le_bytes([c[0], c[1]]),
            false => u16::from_be_bytes([c[0], c[1]]),
        });
        Cow::Owned(
            char::decode_utf16(units)
                .map(|c| c.unwrap_or('\u{FFFD}'))
                .collect(),
        )
    };
    if let Some(rest) = bytes.strip_prefix(&[0xFF, 0xFE]) {
        return utf16(rest, true);
    }
    if let Some(rest) = bytes.strip_prefix(&[0xFE, 0xFF]) {
        return utf16(rest, false);
    }
    // UTF-16 without a mark: ASCII text has every other byte zero.
    if bytes.len() >= 4 && bytes.len().is_multiple_of(2) {
        let head = &bytes[..bytes.len().min(64)];
        let zeros = |offset: usize| head.iter().skip(offset).step_by(2).all(|&b| b == 0);
        if zeros(1) && !zeros(0) {
            return utf16(bytes, true);
        }
        if zeros(0) && !zeros(1) {
            return utf16(bytes, false);
        }
    }
    String::from_utf8_lossy(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16(text: &str, le: bool, bom: bool) -> Vec<u8> {
        let mut out = Vec::new();
        if bom {
            out.extend(if le { [0xFF, 0xFE] } else { [0xFE, 0xFF] });
        }
        for u in text.encode_utf16() {
            out.extend(if le { u.to_le_bytes() } else { u.to_be_bytes() });
        }
        out
    }

    #[test]
    fn the_encodings_windows_editors_write_are_read() {
        let text = "{\"3\": {\"class_type\": \"KSampler\", \"inputs\": {\"text\": \"café 東京\"}}}";
        let mut bom = vec![0xEF, 0xBB, 0xBF];
        bom.extend(text.as_bytes());
        for (what, bytes) in [
            ("utf-8", text.as_bytes().to_vec()),
            ("utf-8 with a BOM", bom),
            ("utf-16le with a BOM", utf16(text, true, true)),
            ("utf-16be with a BOM", utf16(text, false, true)),
            ("utf-16le", utf16(text, true, false)),
            ("utf-16be", utf16(text, false, false)),
        ] {
            assert_eq!(decode(&bytes), text, "{what}");
        }
    }

    #[test]
    fn what_is_not_a_plain_file_of_a_sane_size_is_refused_unread() {
        let tmp = tempfile::tempdir().unwrap();
        let not_a_file = |e: InputError| match e {
            InputError::NotAFile { kind, .. } => kind,
            other => panic!("{other}"),
        };
        let err = read(tmp.path(), "workflow", MAX_WORKFLOW).unwrap_err();
        assert_eq!(not_a_file(err), "a folder");
        let big = tmp.path().join("big.json");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_WORKFLOW + 1).unwrap();
        let err = read(&big, "workflow", MAX_WORKFLOW).unwrap_err();
        assert!(
            matches!(err, InputError::TooBig { len, max: MAX_WORKFLOW, .. } if len == MAX_WORKFLOW + 1),
            "{err}"
        );
        // As the user reads it.
        assert_eq!(
            Error::from(err).to_string(),
            format!(
                "the workflow {} is 64 MiB, more than a workflow can be (64 MiB at most) \
                 (check that this is the workflow file you meant)",
                big.display()
            )
        );
        #[cfg(unix)]
        {
            let err = read(Path::new("/dev/zero"), "workflow", MAX_WORKFLOW).unwrap_err();
            assert_eq!(not_a_file(err), "a device");
            let fifo = tmp.path().join("fifo");
            let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            let err = read(&fifo, "launcher", MAX_SCRIPT).unwrap_err();
            assert_eq!(not_a_file(err), "a named pipe (FIFO)");
        }
        let missing = tmp.path().join("missing.json");
        let err = read(&missing, "workflow", MAX_WORKFLOW).unwrap_err();
        let InputError::Read { source, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        assert!(
            std::error::Error::source(&err).is_some(),
            "the system's error is its source"
        );
        let shown = Error::from(err);
        assert_eq!(shown.io, Some(std::io::ErrorKind::NotFound));
        assert_eq!(
            shown.to_string(),
            format!(
                "cannot read workflow {}: no such file or folder",
                missing.display()
            )
        );
    }
}
