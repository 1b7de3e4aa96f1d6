//! Lines whose needle only appears once the line is normalised.
//!
//! The pre-filter looks for needles in raw lines, but the classifier matches the normalised
//! text, and normalising removes things from inside a line: escape codes (`Request\x1b[1med`
//! reads `Requested`) and the timestamps ComfyUI-Manager glues into the middle of lines (it
//! time-stamps every write). Removing something joins the bytes on both sides of it, so a
//! needle that the raw line lacks but the normalised text holds must span such a junction.
//! [`Joins`] finds the lines that have a junction and says, from the bytes around each one,
//! whether some needle could span it; only those lines are normalised and searched again.

use super::prefilter::Needle;
use super::reader::visible;
use regex::bytes::Regex;
use std::collections::HashSet;

/// A timestamp that ComfyUI-Manager glues inside a line (`unglue` in [`super::state`]
/// removes it with this pattern). ASCII digits only: `\d` would also take other scripts'
/// digits, which the literal search in [`Joins::glue_at`] does not.
pub(super) const GLUED: &str = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]+ - ";

/// How many bytes on each side of a junction are compared with the needles.
const SIDE: usize = 2;

/// What is known about the needles' junctions.
pub struct Joins {
    dash: memchr::memmem::Finder<'static>,
    glued: Regex,
    /// For every place inside every needle: up to [`SIDE`] bytes before it and after it.
    exact: HashSet<u64>,
    /// The same for case-insensitive needles, in ASCII lower case.
    folded: HashSet<u64>,
    /// Case folding reaches beyond ASCII (`k` matches the Kelvin sign): with any
    /// case-insensitive needle, a junction next to a non-ASCII byte may join one.
    fold_non_ascii: bool,
}

/// `before` (its last bytes) and `after` (its first bytes) as one key.
fn key(before: &[u8], after: &[u8]) -> u64 {
    let pack = |b: &[u8]| b.iter().fold(b.len() as u64, |k, &c| k << 8 | c as u64);
    pack(before) << 32 | pack(after)
}

impl Joins {
    pub fn new(needles: &[Needle]) -> Self {
        let (mut exact, mut folded) = (HashSet::new(), HashSet::new());
        let mut fold_non_ascii = false;
        for n in needles {
            let text = if n.case_insensitive {
                fold_non_ascii = true;
                n.text.to_ascii_lowercase()
            } else {
                n.text.clone()
            };
            let b = text.as_bytes();
            let set = if n.case_insensitive {
                &mut folded
            } else {
                &mut exact
            };
            for at in 1..b.len() {
                set.insert(key(
                    &b[at.saturating_sub(SIDE)..at],
                    &b[at..b.len().min(at + SIDE)],
                ));
            }
        }
        Joins {
            dash: memchr::memmem::Finder::new(" - ").into_owned(),
            glued: Regex::new(GLUED).expect("glued timestamp compiles"),
            exact,
            folded,
            fold_non_ascii,
        }
    }

    /// The first timestamp glued inside a line (text before and after it) at or after
    /// `start`: where it ends.
    ///
    /// The same as searching for `[^\n]` + [`GLUED`] + `[^\r\n]`, but led by a literal search
    /// for ` - `: a regex without a leading literal would run its automaton over every byte.
    pub fn glue_at(&self, hay: &[u8], start: usize) -> Option<usize> {
        let mut from = start;
        while let Some(i) = self.dash.find(&hay[from..]) {
            let dash = from + i;
            from = dash + 1;
            let after = dash + 3;
            if hay.get(after).is_none_or(|b| matches!(b, b'\r' | b'\n')) {
                continue;
            }
            if let Some(t) = timestamp_before(hay, dash)
                && t > start
                && hay[t - 1] != b'\n'
            {
                return Some(after + 1);
            }
        }
        None
    }

    /// Whether some needle could span the junction at `at` in `text`: one whose bytes around
    /// a place inside it are the bytes around the junction (as many as both have).
    fn spans(&self, text: &[u8], at: usize) -> bool {
        let (before, after) = (&text[..at], &text[at..]);
        if before.is_empty() || after.is_empty() {
            return false;
        }
        let near = |n: usize| {
            (
                &before[before.len() - n.min(before.len())..],
                &after[..n.min(after.len())],
            )
        };
        if self.fold_non_ascii {
            let (b, a) = near(SIDE);
            if !b.is_ascii() || !a.is_ascii() {
                return true;
            }
        }
        for nb in 1..=SIDE {
            for na in 1..=SIDE {
                let (b, a) = (near(nb).0, near(na).1);
                if b.len() < nb || a.len() < na {
                    continue;
                }
                if self.exact.contains(&key(b, a))
                    || (!self.folded.is_empty()
                        && self
                            .folded
                            .contains(&key(&b.to_ascii_lowercase(), &a.to_ascii_lowercase())))
                {
                    return true;
                }
            }
        }
        false
    }

    /// Whether normalising a raw line (its visible segment without escape codes, then without
    /// glued timestamps) may make a needle that the raw line does not hold: whether some
    /// needle could span one of the places something is removed from.
    pub fn may_join(&self, raw: &[u8]) -> bool {
        let seg = visible(raw);
        // Escape codes are removed as `normalize::strip_ansi` removes them: `ESC [ … final`,
        // or a lone `ESC`.
        let escape_end = |k: usize| {
            let mut j = k + 1;
            if seg.get(j) == Some(&b'[') {
                j += 1;
                while j < seg.len() && !(0x40..=0x7e).contains(&seg[j]) {
                    j += 1;
                }
                j += 1;
            }
            j.min(seg.len())
        };
        let mut text: Vec<u8> = Vec::with_capacity(seg.len());
        let mut junctions: Vec<usize> = Vec::new();
        let mut i = 0;
        while let Some(k) = memchr::memchr(0x1b, &seg[i..]) {
            text.extend_from_slice(&seg[i..i + k]);
            if junctions.last() != Some(&text.len()) {
                junctions.push(text.len());
            }
            i = escape_end(i + k);
        }
        text.extend_from_slice(&seg[i..]);
        if self.dash.find(&text).is_some() {
            (text, junctions) = self.unglue(&text, &junctions);
        }
        junctions.into_iter().any(|at| self.spans(&text, at))
    }

    /// `text` without its glued timestamps (back-to-back ones removed as one), and where the
    /// junctions are then: the old ones moved, a removed run's own added.
    fn unglue(&self, text: &[u8], junctions: &[usize]) -> (Vec<u8>, Vec<usize>) {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for m in self.glued.find_iter(text) {
            match runs.last_mut() {
                Some(run) if run.1 == m.start() => run.1 = m.end(),
                _ => runs.push((m.start(), m.end())),
            }
        }
        // A place moves back by what is removed before it; one inside a run lands on the
        // run's own junction.
        let removed = |j: usize| runs.iter().map(|&(s, e)| j.clamp(s, e) - s).sum::<usize>();
        let mut moved: Vec<usize> = junctions
            .iter()
            .chain(runs.iter().map(|(s, _)| s))
            .map(|&j| j - removed(j))
            .collect();
        moved.sort_unstable();
        moved.dedup();
        let mut out = Vec::with_capacity(text.len());
        let mut kept_from = 0;
        for &(s, e) in &runs {
            out.extend_from_slice(&text[kept_from..s]);
            kept_from = e;
        }
        out.extend_from_slice(&text[kept_from..]);
        (out, moved)
    }
}

/// Where a `YYYY-MM-DDTHH:MM:SS.ffffff` timestamp ending at `end` starts.
fn timestamp_before(hay: &[u8], end: usize) -> Option<usize> {
    let digits = hay[..end]
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let dot = end.checked_sub(digits + 1).filter(|_| digits > 0)?;
    let t = dot.checked_sub(19)?;
    let d = &hay[t..dot + 1];
    let shape = b"dddd-dd-ddTdd:dd:dd.";
    d.iter()
        .zip(shape)
        .all(|(b, s)| {
            if *s == b'd' {
                b.is_ascii_digit()
            } else {
                b == s
            }
        })
        .then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needle(text: &str, case_insensitive: bool) -> Needle {
        Needle {
            text: text.to_string(),
            case_insensitive,
        }
    }

    /// The hand-written search for a glued timestamp finds what the regex it stands for finds.
    #[test]
    fn glue_search_is_the_regex() {
        let re = Regex::new(&format!(r"(?-u:[^\n]){GLUED}(?-u:[^\r\n])")).unwrap();
        let joins = Joins::new(&[]);
        let stamp = "2025-01-16T20:49:52.176503";
        let fixed = [
            format!("{stamp} - line start\n"),
            format!("text{stamp} - \n"),
            format!("text{stamp} - \r\n"),
            format!("Reque{stamp} - sted"),
            format!("x\n{stamp} - y{stamp} - z"),
            format!("1{stamp} - ."),
            "a2025-01-16T20:49:52. - b a2025-01-16T20:49:5.1 - b".to_string(),
            // Other scripts' digits are not a timestamp (U+0661, a fullwidth 2).
            "Reque2025-01-16T20:49:52.\u{661} - sted".to_string(),
            "Reque\u{ff12}025-01-16T20:49:52.1 - sted".to_string(),
            "\u{e9}2025-01-16T20:49:52.1 - \u{e9}".to_string(),
        ];
        let check = |hay: &[u8]| {
            for start in 0..=hay.len() {
                let want = re.shortest_match_at(hay, start);
                let got = joins.glue_at(hay, start);
                assert_eq!(got, want, "{:?} from {start}", String::from_utf8_lossy(hay));
            }
        };
        for hay in &fixed {
            check(hay.as_bytes());
        }
        use proptest::prelude::*;
        let piece = prop::sample::select(vec![
            "2025-01-16T20:49:52.",
            "1",
            "7",
            " - ",
            "-",
            "\n",
            "\r",
            "x",
            "T",
            ":",
            ".",
            "\u{661}",
            "\u{e9}",
        ]);
        proptest!(ProptestConfig::with_cases(2000), |(parts in prop::collection::vec(piece, 0..16))| {
            check(parts.concat().as_bytes());
        });
    }

    #[test]
    fn junctions_that_a_needle_could_span() {
        let joins = Joins::new(&[
            needle("Requested to load ", false),
            needle("[START] Security scan", false),
            needle("Error Code", true),
        ]);
        let stamp = "2025-01-16T20:49:52.176503 - ";
        for (line, could) in [
            // v0.38's level tag: `O]` + ` S` is not inside `[START] Security scan`.
            ("\x1b[32m[INFO]\x1b[0m Saving image to /tmp/x.png", false),
            ("\x1b[32m[INFO]\x1b[0m Requested to load SDXL", false),
            ("Request\x1bed to load X", true),
            ("Reque\x1b[1msted to load X\x1b[0m", true),
            ("Reque\x1b[1m\x1b[0msted to load X", true),
            ("[STAR\x1b[0mT] Security scan", true),
            ("ERROR \x1b[0mcode 1", true),
            (&format!("Reque{stamp}sted to load"), true),
            (&format!("Reque{stamp}{stamp}sted to load"), true),
            (&format!("{stamp}Prompt executed in 1 s{stamp}"), false),
            (&format!("print one{stamp} {stamp}two"), false),
            // An escape code inside a glued timestamp: the timestamp goes, and so does the
            // junction the code made inside it.
            ("Reque2025-01-16T2\x1b[0m0:49:52.1 - sted", true),
            ("plain line\x1b[0m", false),
            ("\x1b[0m", false),
        ] {
            assert_eq!(joins.may_join(line.as_bytes()), could, "{line:?}");
        }
    }

    /// Wherever a junction lets a needle appear, `may_join` says so: every needle split at
    /// every place by an escape code or a glued timestamp, with text around it.
    #[test]
    fn every_split_needle_is_found() {
        let needles = super::super::prefilter::all_needles();
        let joins = Joins::new(&needles);
        for n in &needles {
            let t = &n.text;
            for (at, _) in t.char_indices().skip(1) {
                for cut in [
                    "\x1b",
                    "\x1b[1;33m",
                    "\x1b[0m\x1b[1m",
                    "2026-08-03T14:00:26.205894 - ",
                ] {
                    let line = format!("xx {}{cut}{} yy", &t[..at], &t[at..]);
                    assert!(joins.may_join(line.as_bytes()), "{line:?}");
                }
            }
        }
    }
}
