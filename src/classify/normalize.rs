//! Turning raw ComfyUI console lines into plain text before matching anything.
//!
//! v0.38 adds `\x1b[..m[INFO]\x1b[0m ` to the first line of each record, even when piped
//! (#14036); ComfyUI-Manager and the Desktop app add `2026-05-22T10:00:00.123456 - ` or
//! `[2026-05-22 10:00:00.123] `; tqdm redraws progress bars with `\r`; Windows logs end in
//! CRLF. Every signature is matched on normalised text, so this runs first.

use memchr::memmem::Finder;
use std::borrow::Cow;
use std::sync::LazyLock;

/// The separators looked for on every line, each searcher built once (`str::find` builds one
/// per call, which cost more than the search on a log's short lines).
static DASH: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(" - "));
static PIPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(" | "));

/// Where `finder`'s needle first is in `text`.
fn find(finder: &Finder<'_>, text: &str) -> Option<usize> {
    finder.find(text.as_bytes())
}

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

    /// The Desktop app's own tags (`[info]`, `[warn]`, `[error]`).
    fn parse_lower(s: &str) -> Option<Level> {
        Some(match s {
            "debug" => Level::Debug,
            "info" => Level::Info,
            "warn" | "warning" => Level::Warning,
            "error" => Level::Error,
            _ => return None,
        })
    }
}

/// Python's logging formats that older ComfyUI versions and some launchers use:
/// `ERROR:root:message` (`basicConfig`'s default) and `root - ERROR - message` (what is left of
/// `%(asctime)s - %(name)s - %(levelname)s - %(message)s` once the time is gone).
fn strip_logging_prefix(text: &str) -> Option<(Level, &str)> {
    for level in ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] {
        if let Some(rest) = text.strip_prefix(level)
            && let Some(rest) = rest.strip_prefix(':')
            && let Some(colon) = rest.find(':')
            && is_logger_name(&rest[..colon])
        {
            return Some((Level::parse(level)?, &rest[colon + 1..]));
        }
    }
    let dash = find(&DASH, text)?;
    let name = &text[..dash];
    if !is_logger_name(name) {
        return None;
    }
    let rest = &text[dash + 3..];
    let end = find(&DASH, rest)?;
    let level = Level::parse(&rest[..end])?;
    Some((level, &rest[end + 3..]))
}

/// `root`, `comfy.model_management`, `_logger.py`: a logger's name.
fn is_logger_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 60
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
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
    // A bar that ended without a newline, the next record glued to it (`… 0/30 [00:00<?,
    // ?it/s][INFO] got prompt`): the record is what is read.
    let mut text = after_progress_bar(&plain).unwrap_or(&plain);
    text = strip_compose(text);
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
    } else if let Some(rest) = text.strip_prefix('[')
        && let Some(end) = rest.find(']')
        && let Some(l) = Level::parse_lower(&rest[..end])
    {
        // The Desktop app's `main.log`/`comfyui.log`: `[2025-05-15 10:28:50.212] [info]  text`.
        level = Some(l);
        text = rest[end + 1..].trim_start_matches(' ');
    } else if let Some((l, rest)) = strip_logging_prefix(text) {
        level = Some(l);
        text = rest;
    } else if let Some(rest) = text.strip_prefix("** ") {
        text = rest;
    }
    Line {
        level,
        text: text.to_string(),
    }
}

/// What follows a tqdm bar's closing `it/s]` / `s/it]` on the same line, when anything does.
fn after_progress_bar(text: &str) -> Option<&str> {
    // The last `]` a rate ends with (a line has few `]`: each is a byte search, not a
    // substring search over the whole line).
    let b = text.as_bytes();
    let end = memchr::memrchr_iter(b']', b)
        .find(|&i| b[..i].ends_with(b"it/s") || b[..i].ends_with(b"s/it"))?
        + 1;
    let rest = &text[end..];
    (!rest.trim().is_empty()).then_some(rest)
}

/// Removes `ESC [ … m` (and other CSI) sequences; a lone `ESC` is removed too.
pub fn strip_ansi(s: &str) -> Cow<'_, str> {
    let b = s.as_bytes();
    let Some(first) = memchr::memchr(0x1b, b) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len());
    let (mut kept_from, mut at) = (0, Some(first));
    while let Some(esc) = at {
        out.push_str(&s[kept_from..esc]);
        let mut i = esc + 1;
        if b.get(i) == Some(&b'[') {
            // Up to and including the final byte (`@` to `~`, ASCII, so what follows starts
            // a character); an unfinished sequence runs to the end.
            i += 1;
            while i < b.len() {
                let c = b[i];
                i += 1;
                if (b'@'..=b'~').contains(&c) {
                    break;
                }
            }
        }
        kept_from = i;
        at = memchr::memchr(0x1b, &b[i..]).map(|j| i + j);
    }
    out.push_str(&s[kept_from..]);
    Cow::Owned(out)
}

/// The time a launcher stamped at the start of a raw line, in seconds on a day count from
/// 1970 (`2026-01-16T18:19:56.130066 - `, `[2025-05-15 10:28:50.070] `, `[2024-08-22 14:11] `,
/// `2024-09-15 22:48:26,085 - `). Only differences between two stamps of one log mean anything.
pub fn timestamp_secs(raw: &[u8]) -> Option<f64> {
    let b = raw.strip_prefix(b"[").unwrap_or(raw);
    let num = |s: &[u8]| -> Option<i64> {
        if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(s).ok()?.parse().ok()
    };
    if b.len() < 16
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b' ')
        || b[13] != b':'
    {
        return None;
    }
    let (y, m, d) = (num(&b[..4])?, num(&b[5..7])?, num(&b[8..10])?);
    let (hh, mm) = (num(&b[11..13])?, num(&b[14..16])?);
    let mut secs = 0.0;
    if b.len() >= 19 && b[16] == b':' {
        secs = num(&b[17..19])? as f64;
        if b.len() > 20 && (b[19] == b'.' || b[19] == b',') {
            let frac: Vec<u8> = b[20..]
                .iter()
                .copied()
                .take_while(u8::is_ascii_digit)
                .collect();
            if let Some(f) = num(&frac) {
                secs += f as f64 / 10f64.powi(frac.len() as i32);
            }
        }
    }
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days as f64 * 86_400.0 + (hh * 3600 + mm * 60) as f64 + secs)
}

/// Removes `docker compose`'s `service  | ` prefix (`comfyui  | Requested to load WanVAE`).
fn strip_compose(s: &str) -> &str {
    let Some(bar) = find(&PIPE, s) else {
        return s;
    };
    let name = s[..bar].trim_end();
    let spaced = s[..bar].len() > name.len() || bar > 0;
    if spaced
        && !name.is_empty()
        && name.len() <= 40
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
    {
        return &s[bar + 3..];
    }
    s
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
    // ComfyUI-Manager's older `[2024-08-22 14:11] ` (minutes only).
    let is_minute = |b: &[u8]| {
        b.len() >= 17
            && b[..4].iter().all(u8::is_ascii_digit)
            && b[4] == b'-'
            && b[7] == b'-'
            && b[10] == b' '
            && b[13] == b':'
            && b[16] == b']'
    };
    if b.first() == Some(&b'[') && (is_date(&b[1..]) || is_minute(&b[1..])) {
        if let Some(end) = s.find("] ") {
            return &s[end + 2..];
        }
        if let Some(rest) = s.strip_suffix(']')
            && !rest.contains(']')
        {
            return "";
        }
    } else if is_date(b)
        && let Some(end) = find(&DASH, s)
        && end < 40
    {
        return &s[end + 3..];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `strip_ansi` as it was written first, character by character: the byte-wise one must
    /// agree with it on anything.
    fn strip_ansi_by_chars(s: &str) -> String {
        let mut out = String::new();
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

    #[test]
    fn escape_codes_are_stripped() {
        for (raw, plain) in [
            ("\x1b[32m[INFO]\x1b[0m got prompt", "[INFO] got prompt"),
            ("no codes", "no codes"),
            ("lone \x1b at the end \x1b", "lone  at the end "),
            ("cut \x1b[3", "cut "),
            ("\x1b[1;31mé\x1b[0m✓", "é✓"),
            ("inside \x1b[3€1m code", "inside  code"),
        ] {
            assert_eq!(strip_ansi(raw), plain, "{raw:?}");
            assert_eq!(strip_ansi_by_chars(raw), plain, "{raw:?}");
        }
    }

    proptest! {
        #[test]
        fn escape_codes_are_stripped_as_by_characters(
            s in "(\x1b|\\[|[0-9;]|m|K|@|~|a|é|€|✓| ){0,40}"
        ) {
            prop_assert_eq!(strip_ansi(&s), strip_ansi_by_chars(&s));
        }

        #[test]
        fn a_bar_is_cut_where_its_last_rate_ends(
            s in "(it/s]|s/it]|]|it/s|s/i|t|x|é| ){0,20}"
        ) {
            let by_substrings = ["it/s]", "s/it]"]
                .iter()
                .filter_map(|m| s.rfind(m).map(|i| i + m.len()))
                .max()
                .map(|end| &s[end..])
                .filter(|rest| !rest.trim().is_empty());
            prop_assert_eq!(after_progress_bar(&s), by_substrings);
        }
    }

    #[test]
    fn timestamps() {
        let t = |s: &str| timestamp_secs(s.as_bytes());
        assert_eq!(t("1970-01-02T00:00:01.5 - x"), Some(86_401.5));
        let a = t("2026-01-16T18:19:56.130066 - Requested to load WanVAE").unwrap();
        let b = t("[2026-01-16 18:23:56.130] Stopped").unwrap();
        assert!((b - a - 239.999_934).abs() < 1e-6);
        let c = t("2024-09-15 22:48:26,085 - root - ERROR - x").unwrap();
        let d = t("[2024-09-16 00:00] x").unwrap();
        assert!((d - c - 4293.915).abs() < 1e-6);
        assert_eq!(t("Requested to load WanVAE"), None);
        assert_eq!(t("2024-13-15 22:48:26 - x"), None);
    }

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
                "  0%|          | 0/30 [00:00<?, ?it/s][INFO] got prompt",
                Some(Level::Info),
                "got prompt",
            ),
            (
                " 40%|████      | 8/20 [00:08<00:12,  1.02s/it]",
                None,
                " 40%|████      | 8/20 [00:08<00:12,  1.02s/it]",
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
            // Older ComfyUI: Python logging's default formats (real pastes in
            // fixtures/logs/real/14-… and 23-…).
            (
                "ERROR:root:!!! Exception during processing !!!",
                Some(Level::Error),
                "!!! Exception during processing !!!",
            ),
            (
                "2024-09-15 22:48:26,085 - root - ERROR - Got an OOM, unloading all loaded models.",
                Some(Level::Error),
                "Got an OOM, unloading all loaded models.",
            ),
            (
                "2025-01-07 20:26:28,922 - _logger.py - IPEX - INFO - Conv BatchNorm folding failed",
                None,
                "_logger.py - IPEX - INFO - Conv BatchNorm folding failed",
            ),
            // ComfyUI-Manager's minute stamps, and the Desktop app's lower-case tags.
            (
                "[2024-08-22 14:11] Prompt executed in 26.75 seconds",
                None,
                "Prompt executed in 26.75 seconds",
            ),
            ("[2024-08-22 14:11] ", None, ""),
            (
                "[2025-05-15 10:28:50.212] [info]  got prompt",
                Some(Level::Info),
                "got prompt",
            ),
            ("WARNING: not a logger: x", None, "WARNING: not a logger: x"),
            // docker compose's service prefix.
            (
                "comfyui  | Requested to load WanVAE",
                None,
                "Requested to load WanVAE",
            ),
            (
                "comfyui-1  | [INFO] got prompt",
                Some(Level::Info),
                "got prompt",
            ),
            // A table cell is not a prefix.
            ("| a | b |", None, "| a | b |"),
        ];
        for (raw, level, text) in cases {
            let l = normalize(raw);
            assert_eq!(l.level, *level, "{raw:?}");
            assert_eq!(l.text, *text, "{raw:?}");
        }
    }
}
