//! Turning raw ComfyUI console lines into plain text before matching anything.
//!
//! v0.38 adds `\x1b[..m[INFO]\x1b[0m ` to the first line of each record, even when piped
//! (#14036); ComfyUI-Manager and the Desktop app add `2026-05-22T10:00:00.123456 - ` or
//! `[2026-05-22 10:00:00.123] `; tqdm redraws progress bars with `\r`; Windows logs end in
//! CRLF. Every signature is matched on normalised text, so this runs first.

/// A log level as ComfyUI's `[LEVEL]` tag or a `--verbose … FILE` log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Level {
    Debug,
    Detail,
    Info,
    Warning,
    Error,
    Critical,
}

impl Level {
    fn parse(s: &str) -> Option<Level> {
        Some(match s {
            "DEBUG" => Level::Debug,
            "DETAIL" => Level::Detail,
            "INFO" => Level::Info,
            "WARNING" => Level::Warning,
            "ERROR" => Level::Error,
            "CRITICAL" => Level::Critical,
            _ => return None,
        })
    }
}

/// One normalised line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The level tag, when the line carried one.
    pub level: Option<Level>,
    /// The text without ANSI codes, tags, timestamps or redrawn progress.
    pub text: String,
}

/// Normalises one raw line (without its `\n`).
pub fn normalize(raw: &str) -> Line {
    let raw = raw.strip_suffix('\r').unwrap_or(raw);
    // A tqdm bar redraws with `\r`: what is visible is the last non-empty segment.
    let visible = raw
        .rsplit('\r')
        .find(|s| !s.trim().is_empty())
        .unwrap_or("");
    let plain = strip_ansi(visible);
    let mut text = plain.as_str();
    text = strip_timestamp(text);
    let mut level = None;
    if let Some(rest) = text.strip_prefix('[')
        && let Some(end) = rest.find(']')
        && let Some(l) = Level::parse(&rest[..end])
    {
        level = Some(l);
        text = rest[end + 1..]
            .strip_prefix(' ')
            .unwrap_or(&rest[end + 1..]);
        // A `--verbose LEVEL FILE` log: `[2026-…] [INFO] message` — timestamp first, then level.
    } else if let Some(rest) = text.strip_prefix("** ") {
        text = rest;
    }
    Line {
        level,
        text: text.to_string(),
    }
}

/// Removes `ESC [ … m` (and other CSI) sequences.
pub fn strip_ansi(s: &str) -> String {
    if !s.contains('\x1b') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Removes a launcher timestamp prefix: `2026-05-22T10:00:00.123456 - ` or
/// `[2026-05-22 10:00:00.123] ` (and the same with a `,` decimal mark).
fn strip_timestamp(s: &str) -> &str {
    let b = s.as_bytes();
    let is_date = |b: &[u8]| {
        b.len() >= 19
            && b[..4].iter().all(u8::is_ascii_digit)
            && b[4] == b'-'
            && b[7] == b'-'
            && (b[10] == b'T' || b[10] == b' ')
            && b[13] == b':'
            && b[16] == b':'
    };
    if b.first() == Some(&b'[') && is_date(&b[1..]) {
        if let Some(end) = s.find("] ") {
            return &s[end + 2..];
        }
    } else if is_date(b)
        && let Some(end) = s.find(" - ")
        && end < 40
    {
        return &s[end + 3..];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, Option<Level>, &str)] = &[
            (
                "Total VRAM 24106 MB, total RAM 24106 MB",
                None,
                "Total VRAM 24106 MB, total RAM 24106 MB",
            ),
            (
                "\x1b[32m[INFO]\x1b[0m Requested to load Krea2",
                Some(Level::Info),
                "Requested to load Krea2",
            ),
            (
                "\x1b[1;33m[WARNING]\x1b[0m \x1b[1mDynamic vram disabled with argument.\x1b[0m",
                Some(Level::Warning),
                "Dynamic vram disabled with argument.",
            ),
            (
                "2026-05-22T10:00:00.123456 - Requested to load SD1",
                None,
                "Requested to load SD1",
            ),
            (
                "[2026-05-22 10:00:00.123] [ERROR] Got an OOM, unloading all loaded models.",
                Some(Level::Error),
                "Got an OOM, unloading all loaded models.",
            ),
            (
                "[2026-05-22 10:00:00.123] Prompt executed in 1.00 seconds\r",
                None,
                "Prompt executed in 1.00 seconds",
            ),
            (
                "  5%|▌         | 1/20 [00:01<00:19]\r 10%|█         | 2/20 [00:02<00:18]",
                None,
                " 10%|█         | 2/20 [00:02<00:18]",
            ),
            (
                "** ComfyUI startup time: 2026-05-22 10:00:00.123",
                None,
                "ComfyUI startup time: 2026-05-22 10:00:00.123",
            ),
            (
                "[Prompt Server] web root: /x",
                None,
                "[Prompt Server] web root: /x",
            ),
            ("", None, ""),
        ];
        for (raw, level, text) in cases {
            let l = normalize(raw);
            assert_eq!(l.level, *level, "{raw:?}");
            assert_eq!(l.text, *text, "{raw:?}");
        }
    }
}
