//! The fast pre-filter: literal needles that every interesting line contains.
//!
//! A multi-gigabyte log is mostly noise (custom-node chatter, a bar's redraws). Rather than
//! normalise and match every line, the scanner searches whole buffers for a set of literal
//! needles (multi-literal searchers that run SIMD literal search, Teddy) and looks closely
//! only at the lines they hit. The needles are not a second
//! list of signatures: they are taken from the catalogue's own patterns and from the
//! structural markers, so a signature added to the catalogue is pre-filtered automatically.
//! A needle is matched against the raw line (before ANSI codes, `[LEVEL]` tags and timestamps
//! are stripped), which is why the patterns' `^` anchors play no part here.

use super::joins::Joins;
use super::lines::{Kind, MARKERS};
use crate::classify::catalogue::{Phase, SIGNATURES};
use aho_corasick::{AhoCorasick, Input, MatchKind};
use std::sync::OnceLock;

/// The shortest needle worth having: shorter ones would hit most lines.
const MIN_NEEDLE: usize = 3;
/// A case-insensitive needle is spelled out in every case (`[dD]`…), so it is kept to a few
/// letters to keep the literal set small.
const MAX_CI_LETTERS: usize = 3;

/// One literal that a pattern's matches must contain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needle {
    pub text: String,
    pub case_insensitive: bool,
}

/// The needles of one regular expression: for each top-level alternative, the longest run of
/// literal text that every match of it contains. `None` when some alternative has no such
/// run of [`MIN_NEEDLE`] bytes (the pattern cannot be pre-filtered).
pub fn needles(pattern: &str) -> Option<Vec<Needle>> {
    let (pattern, ci) = match pattern.strip_prefix("(?i)") {
        Some(rest) => (rest, true),
        None => (pattern, false),
    };
    let mut out = Vec::new();
    for alt in split_alternatives(pattern) {
        let runs = literal_runs(alt);
        let best = if ci {
            runs.iter()
                .filter_map(|r| ci_window(r))
                .max_by_key(|w| w.len())
        } else {
            runs.into_iter().max_by_key(|r| r.len())
        }?;
        if best.len() < MIN_NEEDLE {
            return None;
        }
        out.push(Needle {
            text: best,
            case_insensitive: ci,
        });
    }
    Some(out)
}

/// Splits on `|` outside groups and classes.
fn split_alternatives(pattern: &str) -> Vec<&str> {
    let b = pattern.as_bytes();
    let (mut depth, mut in_class, mut start, mut i) = (0usize, false, 0usize, 0usize);
    let mut out = Vec::new();
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'[' if !in_class => in_class = true,
            b']' if in_class => in_class = false,
            b'(' if !in_class => depth += 1,
            b')' if !in_class => depth = depth.saturating_sub(1),
            b'|' if !in_class && depth == 0 => {
                out.push(&pattern[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(&pattern[start..]);
    out
}

/// The runs of literal text in one alternative that every match must contain. Groups,
/// classes, `.`, escapes like `\d` and anchors end a run; a character made optional by `?`,
/// `*` or `{0,…}` is dropped from it.
fn literal_runs(alt: &str) -> Vec<String> {
    let chars: Vec<char> = alt.chars().collect();
    let mut runs = Vec::new();
    let mut run = String::new();
    let mut i = 0;
    let end_run = |run: &mut String, runs: &mut Vec<String>| {
        if !run.is_empty() {
            runs.push(std::mem::take(run));
        }
    };
    while i < chars.len() {
        let c = chars[i];
        // The next token is a literal character, or something that ends the run.
        let literal = match c {
            '\\' => {
                i += 1;
                match chars.get(i) {
                    Some(e) if e.is_ascii_alphanumeric() => None,
                    Some(e) => Some(*e),
                    None => None,
                }
            }
            '[' => {
                // Skip the class: `[^']`, `[]x]`.
                i += 1;
                if chars.get(i) == Some(&'^') {
                    i += 1;
                }
                if chars.get(i) == Some(&']') {
                    i += 1;
                }
                while i < chars.len() && chars[i] != ']' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                None
            }
            '(' => {
                let mut depth = 0;
                while i < chars.len() {
                    match chars[i] {
                        '\\' => i += 1,
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                None
            }
            '.' | '^' | '$' => None,
            '?' | '*' | '+' | '{' => None,
            c => Some(c),
        };
        i += 1;
        // A quantifier after this token.
        let quant = chars.get(i).copied();
        let optional = match quant {
            Some('?') | Some('*') => true,
            Some('{') => chars.get(i + 1) == Some(&'0'),
            _ => false,
        };
        let repeats = matches!(quant, Some('+') | Some('{'));
        match literal {
            Some(ch) if !optional => {
                run.push(ch);
                if repeats {
                    end_run(&mut run, &mut runs);
                }
            }
            _ => end_run(&mut run, &mut runs),
        }
        if optional || repeats {
            // Skip the quantifier itself (and a lazy `?` after it).
            if quant == Some('{') {
                while i < chars.len() && chars[i] != '}' {
                    i += 1;
                }
            }
            i += 1;
            if chars.get(i) == Some(&'?') {
                i += 1;
            }
        }
    }
    end_run(&mut run, &mut runs);
    runs
}

/// The longest window of `run` with at most [`MAX_CI_LETTERS`] letters (each letter doubles
/// the literals a case-insensitive needle expands to).
fn ci_window(run: &str) -> Option<String> {
    let chars: Vec<char> = run.chars().collect();
    let mut best: Option<(usize, usize)> = None;
    let mut start = 0;
    let mut letters = 0;
    for end in 0..chars.len() {
        if chars[end].is_alphabetic() {
            letters += 1;
        }
        while letters > MAX_CI_LETTERS {
            if chars[start].is_alphabetic() {
                letters -= 1;
            }
            start += 1;
        }
        if best.is_none_or(|(s, e)| end + 1 - start > e - s) {
            best = Some((start, end + 1));
        }
    }
    best.map(|(s, e)| chars[s..e].iter().collect())
}

/// A pattern's needles (every catalogue and marker pattern has them: a test says so).
fn needles_of(pattern: &str) -> Vec<Needle> {
    needles(pattern).unwrap_or_else(|| panic!("no needle in {pattern:?}"))
}

/// Every needle: the catalogue's line signatures, then the structural markers.
pub fn all_needles() -> Vec<Needle> {
    let mut out: Vec<Needle> = Vec::new();
    let sigs = SIGNATURES
        .iter()
        .filter(|s| s.phase != Phase::Unfinished)
        .map(|s| s.pattern);
    let markers = MARKERS.iter().map(|m| m.needle);
    for pattern in sigs.chain(markers) {
        for n in needles_of(pattern) {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    // A needle that contains another is redundant: the shorter one finds its lines too.
    let keep: Vec<Needle> = out
        .iter()
        .filter(|n| {
            !out.iter().any(|m| {
                m != *n && !m.case_insensitive && !n.case_insensitive && n.text.contains(&m.text)
            })
        })
        .cloned()
        .collect();
    keep
}

/// The literals that find a needle in raw bytes: the needle itself, or for a
/// case-insensitive one each of its spellings (its few letters in either case, as a regex's
/// `(?i)` folds them: single-character mappings only).
fn literals(n: &Needle) -> Vec<String> {
    if !n.case_insensitive {
        return vec![n.text.clone()];
    }
    let mut out = vec![String::new()];
    for c in n.text.chars() {
        let mut cases = vec![c];
        let lower: Vec<char> = c.to_lowercase().collect();
        let upper: Vec<char> = c.to_uppercase().collect();
        for other in [lower, upper] {
            if let [o] = other[..]
                && !cases.contains(&o)
            {
                cases.push(o);
            }
        }
        out = out
            .iter()
            .flat_map(|s| cases.iter().map(move |c| format!("{s}{c}")))
            .collect();
    }
    out
}

/// The compiled pre-filter: which raw lines are worth a look.
pub struct Prefilter {
    /// The needles' literals, in sets of at most [`CHUNK`]: a set that small is searched
    /// with SIMD (Teddy); above 64 literals the search falls back to a much slower automaton
    /// (85 needles ran at half the speed as one set).
    chunks: Vec<AhoCorasick>,
    /// The set of the progress bars' needles, last of `chunks`: searched only while the sink
    /// wants bars.
    bars: Option<usize>,
    /// Where normalising a line may join a needle together.
    pub joins: Joins,
}

/// Literals per searched set (see [`Prefilter::chunks`]).
const CHUNK: usize = 64;

impl Prefilter {
    pub fn new(needles: &[Needle]) -> Self {
        let bar_needles: Vec<Needle> = MARKERS
            .iter()
            .filter(|m| m.kind == Kind::Progress)
            .flat_map(|m| needles_of(m.needle))
            .collect();
        let (bars, rest): (Vec<Needle>, Vec<Needle>) = needles
            .iter()
            .cloned()
            .partition(|n| bar_needles.contains(n));
        let literals_of =
            |set: &[Needle]| -> Vec<String> { set.iter().flat_map(literals).collect() };
        // Leftmost-first: the semantics under which the crate searches with Teddy (the
        // standard ones use its automaton alone). Which needle matched does not matter, only
        // the line it is on.
        let compile = |c: &[String]| {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostFirst)
                .build(c)
                .expect("pre-filter literals compile")
        };
        let mut chunks: Vec<AhoCorasick> = literals_of(&rest).chunks(CHUNK).map(compile).collect();
        let bars = (!bars.is_empty()).then(|| {
            chunks.push(compile(&literals_of(&bars)));
            chunks.len() - 1
        });
        Prefilter {
            chunks,
            bars,
            joins: Joins::new(needles),
        }
    }

    /// The needle set that finds progress bars.
    pub fn bar_set(&self) -> Option<usize> {
        self.bars
    }

    /// How many needle sets there are (each searched on its own).
    pub fn sets(&self) -> usize {
        self.chunks.len()
    }

    /// The first hit of needle set `set` in `hay` at or after `start`: where the leftmost
    /// match ends (needles hold no newline, so it is on the first line that holds one).
    pub fn hit_at(&self, set: usize, hay: &[u8], start: usize) -> Option<usize> {
        let input = Input::new(hay).range(start..);
        self.chunks[set].find(input).map(|m| m.end())
    }

    /// Whether `hay` holds a needle.
    pub fn hits(&self, hay: &[u8]) -> bool {
        self.chunks.iter().any(|c| c.is_match(hay))
    }
}

/// The pre-filter of every signature and structural line.
pub fn prefilter() -> &'static Prefilter {
    static PRE: OnceLock<Prefilter> = OnceLock::new();
    PRE.get_or_init(|| Prefilter::new(&all_needles()))
}

/// The patterns `logscan` looks for, as regular expressions over raw lines (anchors dropped):
/// what a `grep -E` comparison should search for.
pub fn patterns() -> Vec<String> {
    SIGNATURES
        .iter()
        .filter(|s| s.phase != Phase::Unfinished)
        .map(|s| unanchor(s.pattern))
        .chain(MARKERS.iter().map(|m| unanchor(m.needle)))
        .collect()
}

/// Drops `^` and `$` anchors (not `[^…]` classes): a raw line has prefixes before the text.
pub fn unanchor(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let (mut in_class, mut escaped) = (false, false);
    for c in pattern.chars() {
        if escaped {
            out.push(c);
            escaped = false;
            continue;
        }
        match c {
            '\\' => {
                escaped = true;
                out.push(c);
            }
            '[' if !in_class => {
                in_class = true;
                out.push(c);
            }
            ']' if in_class && !out.ends_with('[') && !out.ends_with("[^") => {
                in_class = false;
                out.push(c);
            }
            '^' | '$' if !in_class => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(p: &str) -> Vec<String> {
        needles(p).unwrap().into_iter().map(|n| n.text).collect()
    }

    #[test]
    fn needles_of_patterns() {
        let cases: &[(&str, &[&str])] = &[
            ("got prompt", &["got prompt"]),
            (r"^Killed$|^Killed: 9$", &["Killed", "Killed: 9"]),
            (r"Fault failed: \d+", &["Fault failed: "]),
            (
                r"HostBuffer\.\w+ failed|hostbuf_grow",
                &["HostBuffer.", "hostbuf_grow"],
            ),
            (r"^aimdo: \S+:\d+:(ERROR|CRITICAL):", &["aimdo: "]),
            (
                r"ModuleNotFoundError: No module named '[^']+'",
                &["ModuleNotFoundError: No module named '"],
            ),
            (
                r"Allocation on device \d* ?would exceed allowed memory",
                &["would exceed allowed memory"],
            ),
            (r"torch\.(cuda\.)?OutOfMemoryError", &["OutOfMemoryError"]),
            (r"^\[\d+\]\+? +Killed +", &["Killed "]),
            (r"Port \d+ is already in use", &[" is already in use"]),
        ];
        for (pattern, expected) in cases {
            assert_eq!(texts(pattern), *expected, "{pattern}");
        }
    }

    #[test]
    fn case_insensitive_needles_stay_small() {
        let n = needles(r"(?i)defaultAllocator\.cpp.*error code 1: cuda runtime").unwrap();
        assert_eq!(n.len(), 1);
        assert!(n[0].case_insensitive);
        let letters = n[0].text.chars().filter(|c| c.is_alphabetic()).count();
        assert!(letters <= MAX_CI_LETTERS, "{:?}", n[0]);
        assert!(n[0].text.len() >= MIN_NEEDLE);
    }

    #[test]
    fn every_catalogue_signature_and_marker_has_needles() {
        for s in SIGNATURES.iter().filter(|s| s.phase != Phase::Unfinished) {
            assert!(needles(s.pattern).is_some(), "{}: {}", s.id, s.pattern);
        }
        for m in MARKERS {
            assert!(needles(m.needle).is_some(), "{}", m.needle);
        }
        assert!(Prefilter::new(&all_needles()).sets() > 1);
    }

    #[test]
    fn raw_lines_from_every_format_pass_the_prefilter() {
        let re = prefilter();
        for line in [
            "got prompt",
            "\x1b[32m[INFO]\x1b[0m \x1b[32mPrompt executed in 3.21 seconds\x1b[0m",
            "2026-05-22T10:00:00.123456 - Requested to load SDXL",
            "[2026-05-22 10:00:00.123] [ERROR] !!! Exception during processing !!! Allocation on device ",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.14 GiB.",
            "[defaultAllocator.cpp::allocate::19] Error code 1: Cuda Runtime (out of memory)",
            "[defaultAllocator.cpp::allocate::19] ERROR CODE 1: CUDA RUNTIME (out of memory)",
            "aimdo: src/model-vbar.c:307:ERROR:VRAM Allocation failed (non OOM)",
            "Killed",
            // A sampler's bar: a prompt at work (one line per bar, however often it redraws).
            " 45%|████▌     | 9/20 [00:04<00:05,  2.1it/s]\r100%|██████████| 20/20 [00:09<00:00,  2.1it/s]\r\n",
        ] {
            assert!(re.hits(line.as_bytes()), "{line:?}");
        }
        assert!(!re.hits("Using pytorch attention".as_bytes()));
    }

    #[test]
    fn a_case_insensitive_needle_is_found_in_every_spelling() {
        let needle = |text: &str, case_insensitive| Needle {
            text: text.to_string(),
            case_insensitive,
        };
        let mut sorted = literals(&needle("r.Cp", true));
        sorted.sort();
        assert_eq!(
            sorted,
            [
                "R.CP", "R.Cp", "R.cP", "R.cp", "r.CP", "r.Cp", "r.cP", "r.cp"
            ]
        );
        assert_eq!(literals(&needle("Ärger", false)), ["Ärger"]);
        assert_eq!(literals(&needle("ä1", true)).len(), 2);
        let pre = Prefilter::new(&[needle("r.cp", true), needle("got prompt", false)]);
        for hit in ["x R.CPP", "aLLOCATOR.Cpp", "got prompt"] {
            assert!(pre.hits(hit.as_bytes()), "{hit}");
        }
        for miss in ["rxcp", "Got prompt", "r.c p"] {
            assert!(!pre.hits(miss.as_bytes()), "{miss}");
        }
    }

    #[test]
    fn a_hit_is_on_the_first_line_that_holds_a_needle() {
        let needle = |text: &str| Needle {
            text: text.into(),
            case_insensitive: false,
        };
        let pre = Prefilter::new(&[
            needle("loaded completely"),
            needle("got prompt"),
            needle("ded comp"),
        ]);
        let hay = b"noise\ngot prompt\nloaded completely\nnoise\n";
        assert_eq!(pre.hit_at(0, hay, 0), Some(16));
        // Overlapping needles on one line: the leftmost's end, still on that line.
        let at = pre.hit_at(0, hay, 17).unwrap();
        assert!((17..=34).contains(&at), "{at}");
        assert_eq!(pre.hit_at(0, hay, 35), None);
    }

    #[test]
    fn unanchor_keeps_negated_classes() {
        assert_eq!(unanchor(r"^Killed$|^a[^']+b"), r"Killed|a[^']+b");
        assert_eq!(unanchor(r"\^x\$"), r"\^x\$");
    }
}
