//! Small text helpers shared by every command: the last lines of a log, command lines as a
//! shell takes them back, byte sizes as a person reads them.

/// The last `n` non-empty lines of `lines`.
pub(crate) fn last_lines(lines: &[String], n: usize) -> Vec<String> {
    let non_empty: Vec<&String> = lines.iter().filter(|l| !l.trim().is_empty()).collect();
    non_empty[non_empty.len().saturating_sub(n)..]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// A command line as a POSIX shell takes it back: words with spaces, quotes or other shell
/// characters in single quotes.
pub(crate) fn shell_words(argv: &[String]) -> String {
    join_quoted(argv, "-_./=:,+@%", |a| {
        format!("'{}'", a.replace('\'', "'\\''"))
    })
}

/// A command line a person can paste into `cmd.exe` as well as into a POSIX shell (for
/// the plain words and paths with spaces that ComfyUI's command lines hold): words with
/// spaces or shell characters in double quotes; backslashes of Windows paths stay as they are.
pub(crate) fn command_line(argv: &[String]) -> String {
    join_quoted(argv, "-_=./:,@%+\\", |a| {
        format!("\"{}\"", a.replace('"', "\\\""))
    })
}

fn join_quoted(argv: &[String], plain: &str, quote: impl Fn(&str) -> String) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || plain.contains(c))
            {
                a.clone()
            } else {
                quote(a)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

const KIB: f64 = 1024.0;
const GIB: f64 = KIB * KIB * KIB;

/// `1 run`, `3 runs`: a count with its noun (plural by `s`).
/// `text` as part of a file name: ASCII letters, digits and `keep` as they are, anything
/// else `_`.
pub(crate) fn file_safe(text: &str, keep: char) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == keep {
                c
            } else {
                '_'
            }
        })
        .collect()
}

pub(crate) fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `23.6 GiB`: one decimal, for sizes of machines and disks.
pub(crate) fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / GIB)
}

/// `0.02 GiB`, or `-` when nothing was measured: two decimals, for the peaks of a run.
pub(crate) fn gib_or_dash(bytes: Option<u64>) -> String {
    bytes
        .map(|b| format!("{:.2} GiB", b as f64 / GIB))
        .unwrap_or_else(|| "-".into())
}

/// `379 MiB`, rounded down.
pub(crate) fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

/// Bytes in the unit a person would pick: `9.00 GiB`, `379 MiB`, `12 KiB`, `-1.50 GiB`.
pub(crate) fn bytes(v: i64) -> String {
    let sign = if v < 0 { "-" } else { "" };
    let b = v.unsigned_abs() as f64;
    if b >= GIB {
        format!("{sign}{:.2} GiB", b / GIB)
    } else if b >= KIB * KIB {
        format!("{sign}{:.0} MiB", b / (KIB * KIB))
    } else if b >= KIB {
        format!("{sign}{:.0} KiB", b / KIB)
    } else {
        format!("{sign}{b} B")
    }
}

/// The number of a `/proc` line's value in KiB (`VmRSS:   1234 kB`, `MemTotal: 24 kB`), in
/// bytes.
pub(crate) fn proc_kib(value: &str) -> Option<u64> {
    value
        .split_ascii_whitespace()
        .next()?
        .parse::<u64>()
        .ok()
        .map(|kib| kib.saturating_mul(1024))
}

/// `text` with its control characters (a newline, an escape sequence that could clear or
/// recolour the terminal) shown as escapes (`\n`, `\u{1b}`): a path or value the user typed
/// stays on one line and does nothing to the terminal it is printed on.
pub(crate) fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The first `n` characters of a commit id (all of a shorter one, as a session file may hold;
/// never cut inside a character).
pub(crate) fn abbrev(commit: &str, n: usize) -> &str {
    match commit.char_indices().nth(n) {
        Some((at, _)) => &commit[..at],
        None => commit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_skip_blank_ones() {
        let lines: Vec<String> = ["a", "", "b", "  ", "c"].map(String::from).into();
        assert_eq!(last_lines(&lines, 2), ["b", "c"]);
        assert_eq!(last_lines(&lines, 9), ["a", "b", "c"]);
        assert!(last_lines(&[], 3).is_empty());
    }

    fn words(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn command_lines_are_quoted_where_needed() {
        let argv = words(&[
            "python3",
            "main.py",
            "--output-directory",
            "/my dir/out",
            "it's",
        ]);
        assert_eq!(
            shell_words(&argv),
            "python3 main.py --output-directory '/my dir/out' 'it'\\''s'"
        );
        assert_eq!(
            command_line(&argv),
            "python3 main.py --output-directory \"/my dir/out\" \"it's\""
        );
        let windows = words(&[r"C:\ComfyUI\python_embeded\python.exe", "say \"hi\"", ""]);
        assert_eq!(
            command_line(&windows),
            r#"C:\ComfyUI\python_embeded\python.exe "say \"hi\"" """#
        );
        assert_eq!(shell_words(&words(&["a\\b"])), "'a\\b'");
    }

    #[test]
    fn sizes_read_like_a_person_writes_them() {
        assert_eq!(gib(25_324_732_416), "23.6 GiB");
        assert_eq!(gib_or_dash(Some(21_474_836)), "0.02 GiB");
        assert_eq!(gib_or_dash(None), "-");
        assert_eq!(mib(400 << 20), "400 MiB");
        assert_eq!(bytes(9 << 30), "9.00 GiB");
        assert_eq!(bytes(379 << 20), "379 MiB");
        assert_eq!(bytes(12 << 10), "12 KiB");
        assert_eq!(bytes(100), "100 B");
        assert_eq!(bytes(-(3 << 29)), "-1.50 GiB");
    }

    #[test]
    fn proc_values_in_kib_become_bytes() {
        assert_eq!(proc_kib("   1234 kB"), Some(1234 * 1024));
        assert_eq!(proc_kib(" 0 kB"), Some(0));
        assert_eq!(proc_kib("lots"), None);
        assert_eq!(proc_kib(""), None);
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(escape_controls("C:\\ComfyUI é"), "C:\\ComfyUI é");
        assert_eq!(escape_controls("a\nb\u{1b}[2J\r"), "a\\nb\\u{1b}[2J\\r");
    }
}
