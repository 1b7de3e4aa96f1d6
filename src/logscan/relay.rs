//! Logs relayed by something else: a front end that tags ComfyUI's stderr
//! (`[ComfyUI-0/STDERR] `), docker compose (`comfyui-1  | `), supervisord, the systemd journal
//! (`Dec 01 10:00:00 host python3[812]: `), a launcher that stamps its own clock
//! (`3:30:02 PM [COMFY] `). No list of wrappers: the prefix is found from the log itself, as
//! whatever repeats at the start of many lines, and stripped before anything is classified.
//!
//! A line's lead is cut into words at spaces; a word's shape is the word with every run of
//! digits made one `#`. The prefix is the longest run of leading shapes shared by a good part of
//! the head of the log (the most common one for one word, then extended a word at a time while
//! nearly as many lines share it). It must look like a wrapper's (a digit or one of `[]|:/()<>`
//! in it), and stripping it must change what the normaliser makes of the lines (the prefixes
//! ComfyUI and its Manager write themselves are already understood there). Up to three layers
//! are peeled (a timestamp, then a tag). Lines without the prefix are read as they are.

use super::lines::marker;
use crate::classify::normalize::normalize;
use std::io::{self, Read};

/// How much of the start of the log the prefix is looked for in.
pub(crate) const HEAD: usize = 64 * 1024;

/// The most layers peeled (a clock, then a tag, then another).
const LAYERS: usize = 3;

/// The most words a prefix may have (the journal's has five).
const MOST_WORDS: usize = 6;

/// One layer of prefix: the shapes of its words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layer(Vec<String>);

/// The prefix layers of a log, outermost first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Prefix(Vec<Layer>);

impl Prefix {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The line without the layers it carries (each is stripped where it is there).
    pub(crate) fn strip<'a>(&self, line: &'a [u8]) -> &'a [u8] {
        let mut rest = line;
        for layer in &self.0 {
            if let Some(n) = layer.len_in(rest) {
                rest = &rest[n..];
            }
        }
        rest
    }
}

/// A word's shape: digit runs made one `#`.
fn shape(word: &[u8]) -> String {
    let mut out = String::new();
    let mut digits = false;
    for &b in word {
        if b.is_ascii_digit() {
            if !digits {
                out.push('#');
            }
            digits = true;
        } else {
            digits = false;
            out.push(b as char);
        }
    }
    out
}

/// The first `n` words of a line (from its first byte: an indented line has no prefix), with
/// where each ends.
fn words(line: &[u8], n: usize) -> Vec<(&[u8], usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    if line.first().is_none_or(|b| *b == b' ' || *b == b'\t') {
        return out;
    }
    while out.len() < n && i < line.len() {
        let start = i;
        while i < line.len() && line[i] != b' ' && line[i] != b'\t' {
            i += 1;
        }
        out.push((&line[start..i], i));
        while i < line.len() && (line[i] == b' ' || line[i] == b'\t') {
            i += 1;
        }
    }
    out
}

impl Layer {
    /// How many bytes of `line` the layer takes (its words and the one space after them).
    fn len_in(&self, line: &[u8]) -> Option<usize> {
        let w = words(line, self.0.len());
        if w.len() < self.0.len()
            || w.iter()
                .zip(&self.0)
                .any(|((word, _), s)| shape(word) != *s)
        {
            return None;
        }
        let end = w.last()?.1;
        Some(if line.get(end) == Some(&b' ') {
            end + 1
        } else {
            end
        })
    }

    /// Whether it can be a wrapper's prefix: a digit or a bracket, bar, colon or slash in it,
    /// and no progress bar.
    fn looks_like_a_prefix(&self) -> bool {
        let text: String = self.0.concat();
        !text.contains('%')
            && text
                .chars()
                .any(|c| matches!(c, '#' | '[' | ']' | '|' | ':' | '/' | '(' | ')' | '<' | '>'))
    }
}

/// Finds the prefix of a log from its head.
pub(crate) fn detect(head: &[u8]) -> Prefix {
    let mut lines: Vec<Vec<u8>> = head
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec())
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .collect();
    // The last line of the head may be cut.
    if head.len() >= HEAD {
        lines.pop();
    }
    let mut layers = Vec::new();
    for _ in 0..LAYERS {
        let Some(layer) = one_layer(&lines) else {
            break;
        };
        for l in lines.iter_mut() {
            if let Some(n) = layer.len_in(l) {
                l.drain(..n);
            }
        }
        layers.push(layer);
    }
    Prefix(layers)
}

/// The most common leading shapes of `n` words, and how many lines have them.
fn most_common(lines: &[Vec<u8>], n: usize) -> Option<(Vec<String>, usize)> {
    let mut counts: std::collections::HashMap<Vec<String>, usize> = Default::default();
    for l in lines {
        let w = words(l, n);
        if w.len() == n {
            *counts
                .entry(w.iter().map(|(word, _)| shape(word)).collect())
                .or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
}

fn one_layer(lines: &[Vec<u8>]) -> Option<Layer> {
    let need = 3.max(lines.len() * 3 / 10);
    let (first, count) = most_common(lines, 1)?;
    if count < need {
        return None;
    }
    let mut best = Layer(first);
    for n in 2..=MOST_WORDS {
        match most_common(lines, n) {
            Some((shapes, c)) if c * 10 >= count * 9 && shapes[..n - 1] == best.0[..] => {
                best = Layer(shapes)
            }
            _ => break,
        }
    }
    // Of its leading parts that look like a wrapper's, the one that leaves the most level
    // tags for the normaliser to read (`2024-… - root - ERROR - …` keeps `root - ERROR -`),
    // the longest of those.
    // Never one that takes what makes a line ComfyUI's own structural line with it (a run of
    // `lowvram: loaded module regularly …` debug lines repeats its lead as a wrapper's prefix
    // does): of those that leave no fewer such lines than were there, the ones that leave the
    // most.
    let candidates: Vec<(Layer, usize)> = (1..=best.0.len())
        .map(|n| Layer(best.0[..n].to_vec()))
        .filter(Layer::looks_like_a_prefix)
        .filter_map(|l| {
            let (whole, left) = markers(&l, lines);
            (left >= whole).then_some((l, left))
        })
        .collect();
    let most = candidates.iter().map(|(_, left)| *left).max()?;
    let best = candidates
        .into_iter()
        .filter(|(_, left)| *left == most)
        .map(|(l, _)| l)
        .max_by_key(|l| (levels_left(l, lines), l.0.len()))?;
    (changes_the_reading(&best, lines) && leaves_lines(&best, lines)).then_some(best)
}

/// Whether what the layer leads is lines of their own: what is left once it is stripped
/// has a letter in most of them, and is not one and the same text everywhere (a line printed
/// again and again, an OOM of a retry loop, repeats its start as a wrapper's prefix does, but
/// its "prefix" is the line itself).
fn leaves_lines(layer: &Layer, lines: &[Vec<u8>]) -> bool {
    let rests: Vec<&[u8]> = lines
        .iter()
        .filter_map(|l| layer.len_in(l).map(|n| &l[n..]))
        .collect();
    let readable = rests
        .iter()
        .filter(|r| r.iter().any(u8::is_ascii_alphabetic))
        .count();
    let first = rests.first();
    let all_the_same = rests.iter().all(|r| Some(r) == first);
    readable * 2 > rests.len() && !all_the_same
}

/// Of the lines that carry the layer, how many are one of ComfyUI's structural lines as they
/// are, and how many once it is stripped.
fn markers(layer: &Layer, lines: &[Vec<u8>]) -> (usize, usize) {
    let is_marker = |b: &[u8]| marker(&normalize(&String::from_utf8_lossy(b)).text).is_some();
    lines
        .iter()
        .fold((0, 0), |(whole, left), l| match layer.len_in(l) {
            Some(n) => (
                whole + usize::from(is_marker(l)),
                left + usize::from(is_marker(&l[n..])),
            ),
            None => (whole, left),
        })
}

/// How many of the lines with the layer the normaliser finds a level in once it is stripped.
fn levels_left(layer: &Layer, lines: &[Vec<u8>]) -> usize {
    lines
        .iter()
        .filter_map(|l| layer.len_in(l).map(|n| &l[n..]))
        .filter(|rest| normalize(&String::from_utf8_lossy(rest)).level.is_some())
        .count()
}

/// Whether stripping the layer changes what the normaliser reads in the lines that have it
/// (ComfyUI's own level tags and the Manager's timestamps it already understands).
fn changes_the_reading(layer: &Layer, lines: &[Vec<u8>]) -> bool {
    let (mut changed, mut with) = (0, 0);
    for l in lines {
        if let Some(n) = layer.len_in(l) {
            with += 1;
            let whole = normalize(&String::from_utf8_lossy(l)).text;
            let rest = normalize(&String::from_utf8_lossy(&l[n..])).text;
            changed += usize::from(whole != rest);
        }
    }
    changed * 2 > with
}

/// A reader that strips a prefix from every line that carries it. A line's first
/// [`DECIDE`] bytes are enough to know (a prefix is a few words); the rest of a line, however
/// long (a progress bar redrawn for hours), passes straight through, so memory stays bounded.
pub(crate) struct Stripper<R> {
    inner: R,
    prefix: Prefix,
    /// Bytes ready to give out, from `pos` on.
    out: Vec<u8>,
    pos: usize,
    /// The start of the line being read, until it holds a newline or `DECIDE` bytes.
    head: Vec<u8>,
    /// The current line's start was decided: the rest of it passes as it is.
    passing: bool,
    done: bool,
}

/// How much of a line's start is looked at for its prefix.
const DECIDE: usize = 4096;

impl<R: Read> Stripper<R> {
    pub(crate) fn new(inner: R, prefix: Prefix) -> Self {
        Stripper {
            inner,
            prefix,
            out: Vec::new(),
            pos: 0,
            head: Vec::new(),
            passing: false,
            done: false,
        }
    }

    fn decide(&mut self) {
        self.out.extend_from_slice(self.prefix.strip(&self.head));
        self.head.clear();
    }

    fn take(&mut self, mut rest: &[u8]) {
        while !rest.is_empty() {
            let nl = rest.iter().position(|b| *b == b'\n');
            if self.passing {
                let end = nl.map_or(rest.len(), |i| i + 1);
                self.out.extend_from_slice(&rest[..end]);
                self.passing = nl.is_none();
                rest = &rest[end..];
                continue;
            }
            let room = DECIDE - self.head.len();
            match nl {
                Some(i) if i < room => {
                    self.head.extend_from_slice(&rest[..=i]);
                    self.decide();
                    rest = &rest[i + 1..];
                }
                _ if rest.len() < room => {
                    self.head.extend_from_slice(rest);
                    rest = &[];
                }
                _ => {
                    self.head.extend_from_slice(&rest[..room]);
                    self.decide();
                    self.passing = true;
                    rest = &rest[room..];
                }
            }
        }
    }

    fn fill(&mut self) -> io::Result<()> {
        let mut buf = [0u8; 64 * 1024];
        while self.pos == self.out.len() && !self.done {
            self.out.clear();
            self.pos = 0;
            let n = self.inner.read(&mut buf)?;
            if n == 0 {
                self.done = true;
                if !self.head.is_empty() {
                    self.decide();
                }
                break;
            }
            self.take(&buf[..n]);
        }
        Ok(())
    }
}

impl<R: Read> Read for Stripper<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.out.len() {
            self.fill()?;
        }
        let n = buf.len().min(self.out.len() - self.pos);
        buf[..n].copy_from_slice(&self.out[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_printed_again_and_again_is_no_prefix() {
        let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.14 GiB.\n";
        for n in [3, 20, 1000] {
            assert!(detect(oom.repeat(n).as_bytes()).is_empty(), "{n} lines");
        }
        // A counter that changes is no prefix either: stripped, it leaves nothing to read.
        let done: String = (0..40)
            .map(|i| format!("Prompt executed in {i}.{i} seconds\n"))
            .collect();
        assert!(detect(done.as_bytes()).is_empty());
        // A wrapper's prefix on a line repeated by a retry loop is still found.
        let relayed: String = (0..5)
            .map(|i| format!("[ComfyUI-0/STDERR] {oom}[ComfyUI-0/STDERR] Retrying ({i})\n"))
            .collect();
        assert!(!detect(relayed.as_bytes()).is_empty());
    }

    fn stripped(log: &str) -> String {
        let p = detect(log.as_bytes());
        let mut out = String::new();
        Stripper::new(log.as_bytes(), p)
            .read_to_string(&mut out)
            .unwrap();
        out
    }

    const LOG: &str = "got prompt\nRequested to load SDXL\nloaded completely 9000.0 4897.0 True\n  File \"x.py\", line 3, in f\n    y()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB\nPrompt executed in 3.2 seconds\n";

    /// Prefixes no rule names, made up here: each is found and stripped, the log underneath
    /// comes back exactly (its indentation too).
    #[test]
    fn made_up_prefixes_are_found_and_stripped() {
        let wraps: [&dyn Fn(usize) -> String; 6] = [
            &|_| "worker-7 >> ".to_string(),
            &|i| format!("Jan 0{} 10:1{i}:0{i} gpu-box python3[4411]: ", 1 + i % 3),
            &|i| format!("{}:0{i}:1{i} PM [COMFY] ", 1 + i),
            &|i| format!("<job 42> [t={i}.{i}s] "),
            &|i| {
                format!(
                    "2026-03-0{} 10:00:0{i}.{i}1 [Debug] [ComfyUI-0/STDERR] ",
                    1 + i % 2
                )
            },
            &|i| format!("pod/comfy-{i}f9x :: "),
        ];
        for wrap in wraps {
            let log: String = LOG
                .lines()
                .enumerate()
                .map(|(i, l)| format!("{}{l}\n", wrap(i)))
                .collect();
            assert_eq!(stripped(&log), LOG, "{log}");
        }
    }

    #[test]
    fn a_log_of_comfyui_itself_is_left_as_it_is() {
        assert!(detect(LOG.as_bytes()).is_empty());
        let tagged: String = LOG.lines().map(|l| format!("[INFO] {l}\n")).collect();
        assert!(detect(tagged.as_bytes()).is_empty(), "level tags stay");
        let manager: String = LOG
            .lines()
            .map(|l| format!("[2026-05-22 10:00:00.123] {l}\n"))
            .collect();
        assert!(
            detect(manager.as_bytes()).is_empty(),
            "the Manager's own stamps stay"
        );
    }

    #[test]
    fn a_line_longer_than_what_is_looked_at_passes_through_whole() {
        let bar = "x".repeat(3 * DECIDE + 17);
        let log = format!("<job 42> got prompt\n<job 42> {bar}\n<job 42> done\n<job 42> a\n");
        assert_eq!(stripped(&log), format!("got prompt\n{bar}\ndone\na\n"));
        // Read a byte at a time, the same.
        let p = detect(log.as_bytes());
        let mut r = Stripper::new(log.as_bytes(), p);
        let mut out = Vec::new();
        let mut one = [0u8; 1];
        while r.read(&mut one).unwrap() == 1 {
            out.push(one[0]);
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("got prompt\n{bar}\ndone\na\n")
        );
    }

    #[test]
    fn comfyuis_own_lines_that_repeat_their_lead_are_no_prefix() {
        let log: String = (0..12)
            .map(|i| format!("lowvram: loaded module regularly decoder.up.{i}.norm RMS_norm()\n"))
            .collect();
        assert!(detect(log.as_bytes()).is_empty());
        // Under a wrapper's prefix they are read once it is stripped.
        let relayed: String = log.lines().map(|l| format!("<job 42> {l}\n")).collect();
        assert_eq!(stripped(&relayed), log);
        // Unprefixed lines (bars written straight to the terminal) do not outvote them.
        let mut mixed: String = [
            "Total VRAM 24564 MB, total RAM 65457 MB",
            "pytorch version: 2.9.1+cu130",
            "Set vram state to: NORMAL_VRAM",
            "Device: cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync",
            "Starting server",
            "To see the GUI go to: http://127.0.0.1:8188",
            "got prompt",
            "Requested to load SDXL",
        ]
        .iter()
        .map(|l| format!("[worker-1] {l}\n"))
        .collect();
        for i in 1..=20 {
            mixed.push_str(&format!(
                " {}%|#   | {i}/20 [00:01<00:09,  2.00it/s]\n",
                i * 5
            ));
        }
        assert!(stripped(&mixed).starts_with("Total VRAM 24564 MB"));
    }

    #[test]
    fn lines_without_the_prefix_are_kept_whole() {
        let mut log = String::new();
        for (i, l) in LOG.lines().enumerate() {
            if i % 3 == 2 {
                log.push_str(&format!("{l}\n"));
            } else {
                log.push_str(&format!("<job 42> {l}\n"));
            }
        }
        assert_eq!(stripped(&log), LOG);
    }
}
