//! Opening the log: a file or standard input, checked for what it is before it is scanned.
//!
//! Users hand over what they have: a console log saved by Windows PowerShell (`>` writes
//! UTF-16 with a byte-order mark), a UTF-8 file with a BOM, a gzipped log, or the wrong file
//! altogether (a workflow PNG, a zip). The first bytes tell which; only the first two are
//! refused, with what to do instead.

use crate::error::{Error, io_reason};
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// How many bytes are looked at to tell a text log from a binary file.
const SNIFF: usize = 8192;

/// An opened log.
pub struct Input {
    /// The file's name as given (`-` for standard input).
    pub name: String,
    /// Decoded to UTF-8 bytes (still possibly invalid UTF-8, which the scanner tolerates).
    pub reader: Box<dyn Read>,
    /// `utf-8`, `utf-8 (BOM)`, `utf-16le`, `utf-16be`.
    pub encoding: &'static str,
    /// What the start of the file looks like when it is plainly not a log (`JSON`).
    pub looks_like: Option<&'static str>,
    /// The start of the text names ComfyUI or PyTorch (a path, a custom node's prefix, a
    /// module): a fragment worth reading even with no line logscan knows.
    pub mentions_comfy: bool,
}

/// Why a file cannot be read as a log.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LogFileError {
    #[error("{0} is a folder, not a log file")]
    Folder(String),
    /// The system would not open it.
    #[error("cannot read {}: {}", path.display(), io_reason(source))]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Opened, but its first bytes could not be read.
    #[error("cannot read {shown}: {source}")]
    Read {
        shown: String,
        #[source]
        source: io::Error,
    },
    #[error("{0} is empty")]
    Empty(String),
    /// Compressed, an archive, a picture, a program: `kind` in words; `name` as given.
    #[error("{shown} is {kind}, not a text log")]
    Binary {
        shown: String,
        name: String,
        kind: &'static str,
    },
}

impl From<LogFileError> for Error {
    fn from(e: LogFileError) -> Error {
        let message = e.to_string();
        match e {
            LogFileError::Folder(_) => Error::usage(message).hint(
                "pass ComfyUI's console log or its user/comfyui.log, e.g. vrambisect logscan ComfyUI/user/comfyui.log",
            ),
            LogFileError::Open { source, .. } => Error::from_io(message, &source),
            LogFileError::Read { .. } => Error::usage(message),
            LogFileError::Empty(_) => Error::usage(message).hint(
                "ComfyUI writes its log to the console (stderr) and, with ComfyUI-Manager or the Desktop app, to user/comfyui.log",
            ),
            LogFileError::Binary { kind, name, .. } => Error::usage(message).hint(match kind {
                "gzip-compressed" => {
                    format!("decompress it first: gzip -dc {name} | vrambisect logscan -")
                }
                "a zip archive" => "unzip it and pass the log inside".to_string(),
                _ => "pass ComfyUI's console log or its user/comfyui.log".to_string(),
            }),
        }
    }
}

type Result<T> = std::result::Result<T, LogFileError>;

/// Opens `FILE` or `-` and checks that it can be a log.
pub(crate) fn open(path: &Path) -> Result<Input> {
    let (name, raw): (String, Box<dyn Read>) = if path == Path::new("-") {
        ("-".to_string(), Box::new(io::stdin()))
    } else {
        // A name that is not UTF-8 is shown with U+FFFD where it is not; the file is opened
        // by its real name.
        let arg = path.to_string_lossy();
        if path.is_dir() {
            return Err(LogFileError::Folder(arg.to_string()));
        }
        let file = File::open(path).map_err(|source| LogFileError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        (arg.to_string(), Box::new(file))
    };
    sniff(name, raw)
}

/// Looks at the first bytes: empty, binary, compressed, or which text encoding.
pub(crate) fn sniff(name: String, mut raw: Box<dyn Read>) -> Result<Input> {
    let shown = if name == "-" {
        "standard input".to_string()
    } else {
        name.clone()
    };
    let mut head = Vec::with_capacity(SNIFF);
    (&mut raw)
        .take(SNIFF as u64)
        .read_to_end(&mut head)
        .map_err(|source| LogFileError::Read {
            shown: shown.clone(),
            source,
        })?;
    if head.is_empty() {
        return Err(LogFileError::Empty(shown));
    }
    let (encoding, skip): (&'static str, usize) = if head.starts_with(&[0xEF, 0xBB, 0xBF]) {
        ("utf-8 (BOM)", 3)
    } else if head.starts_with(&[0xFF, 0xFE]) {
        ("utf-16le", 2)
    } else if head.starts_with(&[0xFE, 0xFF]) {
        ("utf-16be", 2)
    } else {
        ("utf-8", 0)
    };
    if !encoding.starts_with("utf-16")
        && let Some(kind) = binary_kind(&head)
    {
        return Err(LogFileError::Binary { shown, name, kind });
    }
    head.drain(..skip);
    let start = head
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(head.len());
    let after = |i: usize| head[i..].iter().copied().find(|b| !b.is_ascii_whitespace());
    let looks_like = match head.get(start) {
        Some(b'{') => Some("JSON (a workflow?)"),
        // `[{` or `["` is JSON; `[E] [TRT]`, `[INFO]` or `[2025-…]` is a log line.
        Some(b'[') if matches!(after(start + 1), Some(b'{' | b'"' | b']')) => {
            Some("JSON (a workflow?)")
        }
        Some(b'<') => Some("HTML or XML"),
        _ => None,
    };
    // (UTF-16 is still raw here: its NUL bytes are left out.)
    let text: Vec<u8> = head.iter().copied().filter(|b| *b != 0).collect();
    let lower = String::from_utf8_lossy(&text).to_ascii_lowercase();
    let mentions_comfy = ["comfy", "torch"].iter().any(|w| lower.contains(w));
    let cr_lines = encoding.starts_with("utf-8") && ends_lines_with_cr(&head);
    let encoding = match encoding {
        "utf-8" if cr_lines => "utf-8 (CR line ends)",
        "utf-8 (BOM)" if cr_lines => "utf-8 (BOM, CR line ends)",
        e => e,
    };
    let joined: Box<dyn Read> = Box::new(io::Cursor::new(head).chain(raw));
    let reader: Box<dyn Read> = match encoding {
        "utf-16le" => Box::new(Utf16Reader::new(joined, false)),
        "utf-16be" => Box::new(Utf16Reader::new(joined, true)),
        _ if cr_lines => Box::new(CrLines::new(joined)),
        _ => joined,
    };
    Ok(Input {
        name,
        reader,
        encoding,
        looks_like,
        mentions_comfy,
    })
}

/// Whether a log's lines end in a bare `\r` (classic Mac line ends, or a capture that lost its
/// `\n`s): no `\n` in the head, and at least two of its `\r`-separated pieces are text
/// rather than a progress bar's redraws (a long bar at a log's start has no `\n` either).
fn ends_lines_with_cr(head: &[u8]) -> bool {
    if memchr::memchr(b'\n', head).is_some() {
        return false;
    }
    let bar = |piece: &[u8]| super::lines::is_progress(&String::from_utf8_lossy(piece));
    head.split(|&b| b == b'\r')
        .filter(|piece| !piece.trim_ascii().is_empty() && !bar(piece))
        .take(2)
        .count()
        == 2
}

/// A log with bare `\r` line ends, read with each `\r` as a line end up to its first `\n`:
/// if one comes after all (the head was a progress display the test above did not know), the
/// rest is read as it is.
struct CrLines<R: Read> {
    inner: R,
    newline_seen: bool,
}

impl<R: Read> CrLines<R> {
    fn new(inner: R) -> Self {
        CrLines {
            inner,
            newline_seen: false,
        }
    }
}

impl<R: Read> Read for CrLines<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if self.newline_seen {
            return Ok(n);
        }
        let end = match memchr::memchr(b'\n', &buf[..n]) {
            Some(i) => {
                self.newline_seen = true;
                // A `\r\n` keeps its `\r` (one line end, not two).
                if i > 0 && buf[i - 1] == b'\r' {
                    i - 1
                } else {
                    i
                }
            }
            None => n,
        };
        for b in &mut buf[..end] {
            if *b == b'\r' {
                *b = b'\n';
            }
        }
        Ok(n)
    }
}

/// What a binary head is, if it is one (a NUL byte in text is as good a test as grep's).
pub(crate) fn binary_kind(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(&[0x1F, 0x8B]) {
        Some("gzip-compressed")
    } else if head.starts_with(b"PK\x03\x04") {
        Some("a zip archive")
    } else if head.starts_with(b"\x89PNG") {
        Some("a PNG image")
    } else if head.contains(&0) {
        Some("a binary file")
    } else {
        None
    }
}

/// Decodes UTF-16 to UTF-8 on the fly (unpaired surrogates become U+FFFD).
struct Utf16Reader<R: Read> {
    inner: R,
    big_endian: bool,
    /// Decoded bytes not yet handed out.
    out: Vec<u8>,
    out_pos: usize,
    /// An odd byte, or a high surrogate, left from the last read.
    pending: Vec<u8>,
    raw: Vec<u8>,
}

impl<R: Read> Utf16Reader<R> {
    fn new(inner: R, big_endian: bool) -> Self {
        Utf16Reader {
            inner,
            big_endian,
            out: Vec::new(),
            out_pos: 0,
            pending: Vec::new(),
            raw: vec![0; 1 << 16],
        }
    }

    fn decode_more(&mut self) -> io::Result<bool> {
        let n = loop {
            match self.inner.read(&mut self.raw) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        self.out.clear();
        self.out_pos = 0;
        if n == 0 {
            if !self.pending.is_empty() {
                self.pending.clear();
                self.out.extend_from_slice("\u{FFFD}".as_bytes());
                return Ok(true);
            }
            return Ok(false);
        }
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.extend_from_slice(&self.raw[..n]);
        let even = bytes.len() & !1;
        let mut units: Vec<u16> = bytes[..even]
            .chunks_exact(2)
            .map(|p| {
                if self.big_endian {
                    u16::from_be_bytes([p[0], p[1]])
                } else {
                    u16::from_le_bytes([p[0], p[1]])
                }
            })
            .collect();
        let mut keep = bytes[even..].to_vec();
        // A high surrogate at the end waits for its partner.
        if let Some(&last) = units.last()
            && (0xD800..0xDC00).contains(&last)
        {
            units.pop();
            let pair = &bytes[even - 2..even];
            let mut k = pair.to_vec();
            k.extend_from_slice(&keep);
            keep = k;
        }
        self.pending = keep;
        for c in char::decode_utf16(units) {
            let c = c.unwrap_or('\u{FFFD}');
            let mut b = [0u8; 4];
            self.out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
        }
        Ok(true)
    }
}

impl<R: Read> Read for Utf16Reader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.out_pos >= self.out.len() {
            if !self.decode_more()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.out.len() - self.out_pos);
        buf[..n].copy_from_slice(&self.out[self.out_pos..self.out_pos + n]);
        self.out_pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: Vec<u8>) -> Result<(String, &'static str)> {
        let mut input = sniff("x.log".into(), Box::new(io::Cursor::new(bytes)))?;
        let mut s = String::new();
        input.reader.read_to_string(&mut s).unwrap();
        Ok((s, input.encoding))
    }

    #[test]
    fn bare_cr_line_ends_are_line_ends() {
        let (text, encoding) =
            read_all(b"got prompt\rtorch.OutOfMemoryError: x\r".to_vec()).unwrap();
        assert_eq!(text, "got prompt\ntorch.OutOfMemoryError: x\n");
        assert_eq!(encoding, "utf-8 (CR line ends)");
        // A bar redrawn at the start (no newline yet) and a CRLF log are left as they are.
        // A progress display the bar test does not know, then an ordinary log: only the head
        // is split at its `\r`s.
        let mut raw = b"Downloading: 1.0MB [00:01, 1.0MB/s]\r".repeat(300);
        raw.extend_from_slice(b"got prompt\r\nPrompt executed in 1.00 seconds\r\n 5%|5 | 1/20\r");
        let (text, _) = read_all(raw).unwrap();
        assert!(text.starts_with("Downloading: 1.0MB [00:01, 1.0MB/s]\nDownloading"));
        assert!(
            text.ends_with("\ngot prompt\r\nPrompt executed in 1.00 seconds\r\n 5%|5 | 1/20\r"),
            "{}",
            &text[text.len() - 80..]
        );
        for raw in [
            &b"  5%|5 | 1/20 [00:01<00:19, 1.0it/s]\r 10%|# | 2/20 [00:02<00:18, 1.0it/s]\r"[..],
            b"got prompt\r\nPrompt executed in 1.00 seconds\r\n",
            b"one line\r",
        ] {
            let (text, encoding) = read_all(raw.to_vec()).unwrap();
            assert_eq!(text.as_bytes(), raw);
            assert_eq!(encoding, "utf-8");
        }
    }

    #[test]
    fn encodings() {
        let text = "got prompt\r\nPrompt executed in 1.00 seconds – ok 😀\r\n";
        assert_eq!(read_all(text.into()).unwrap(), (text.to_string(), "utf-8"));
        let mut bom = vec![0xEF, 0xBB, 0xBF];
        bom.extend_from_slice(text.as_bytes());
        assert_eq!(read_all(bom).unwrap(), (text.to_string(), "utf-8 (BOM)"));
        let mut le = vec![0xFF, 0xFE];
        le.extend(text.encode_utf16().flat_map(|u| u.to_le_bytes()));
        assert_eq!(read_all(le).unwrap(), (text.to_string(), "utf-16le"));
        let mut be = vec![0xFE, 0xFF];
        be.extend(text.encode_utf16().flat_map(|u| u.to_be_bytes()));
        assert_eq!(read_all(be).unwrap(), (text.to_string(), "utf-16be"));
    }

    #[test]
    fn utf16_split_across_reads() {
        // A reader that hands out one byte at a time splits code units and surrogate pairs.
        struct Drip(Vec<u8>, usize);
        impl Read for Drip {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.1 >= self.0.len() || buf.is_empty() {
                    return Ok(0);
                }
                buf[0] = self.0[self.1];
                self.1 += 1;
                Ok(1)
            }
        }
        let text = "a😀b\n";
        let bytes: Vec<u8> = text.encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
        let mut r = Utf16Reader::new(Drip(bytes, 0), false);
        let mut s = String::new();
        r.read_to_string(&mut s).unwrap();
        assert_eq!(s, text);
    }

    #[test]
    fn refusals() {
        let err = |b: &[u8]| read_all(b.to_vec()).unwrap_err();
        let kind = |b: &[u8]| match err(b) {
            LogFileError::Binary { kind, .. } => kind,
            other => panic!("{other}"),
        };
        assert!(matches!(err(b""), LogFileError::Empty(s) if s == "x.log"));
        assert_eq!(kind(b"\x1f\x8b\x08\x00abc"), "gzip-compressed");
        assert_eq!(kind(b"PK\x03\x04abc"), "a zip archive");
        assert!(kind(b"\x89PNG\r\n\x1a\n\0\0").contains("PNG"));
        // As the user reads it.
        let e = Error::from(err(b"ELF\0\0\0binary"));
        assert_eq!(e.message, "x.log is a binary file, not a text log");
        assert_eq!(e.exit_code(), crate::error::exit::USAGE);
        let e = Error::from(err(b"\x1f\x8b\x08\x00abc"));
        assert_eq!(
            e.hint.as_deref(),
            Some("decompress it first: gzip -dc x.log | vrambisect logscan -")
        );
    }
}
