//! Reading a log of any size in one pass, in bounded memory.
//!
//! The log is read in 1 MiB buffers. In each, the pre-filter ([`super::prefilter`]) finds the
//! lines worth a look; only those are handed to the [`Sink`], unless it asks for every line
//! (while a server starts, or right after a `Traceback`). Lines may end in `\n`, `\r\n`, or
//! carry tqdm's `\r` redraws; a line longer than the buffer (a progress bar redrawn for hours)
//! is cut down as it streams to its last visible segment, at most [`MAX_LINE`] bytes. The
//! lines just before any point stay reachable ([`Before`]) without keeping the whole log.

use super::prefilter::Prefilter;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::{self, Read};

/// The read buffer.
const BUF: usize = 1 << 20;
/// The most of one over-long line that is kept.
pub const MAX_LINE: usize = 64 << 10;
/// How many of the previous buffers' last lines stay reachable.
const CARRY: usize = 8;
/// The most of one line kept in [`Before`].
const CARRY_LINE: usize = 4096;

/// Which lines reach the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Pre-filter hits, and every line while the sink asks for them (the normal mode).
    Prefilter,
    /// Every line (for tests: must give the same answer as `Prefilter`).
    EveryLine,
}

/// What the scanner hands lines to.
pub trait Sink {
    /// Whether the next lines must all be seen, not only pre-filter hits.
    fn every_line(&self) -> bool;
    /// One raw line (no `\n`), its 1-based number, and access to the lines before it.
    fn line(&mut self, raw: &[u8], number: u64, before: &Before<'_>);
    /// The text this sink matches for a raw line. The pre-filter looks at it for the lines
    /// where removing escape codes or glued timestamps may join a needle together
    /// ([`super::joins`]); everywhere else the raw line holds the same needles.
    fn text<'r>(&self, raw: &'r [u8]) -> Cow<'r, str> {
        String::from_utf8_lossy(raw)
    }
    /// Whether progress bars are worth a look now (they are most of a log's lines, and say
    /// something only where no prompt is known to be at work).
    fn wants_bars(&self) -> bool {
        true
    }
}

/// The lines before a point in the log.
pub struct Before<'a> {
    region: &'a [u8],
    carry: &'a VecDeque<Vec<u8>>,
}

impl<'a> Before<'a> {
    /// Only the given lines (oldest first), for a point after the whole log.
    pub fn from_carry(carry: &'a VecDeque<Vec<u8>>) -> Self {
        Before { region: &[], carry }
    }

    /// The last `n` non-blank lines (their visible text, lossily decoded), oldest first.
    pub fn last(&self, n: usize) -> Vec<String> {
        let mut out: Vec<String> = Vec::with_capacity(n);
        let mut rest = self.region;
        while out.len() < n && !rest.is_empty() {
            let body = rest.strip_suffix(b"\n").unwrap_or(rest);
            let start = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let line = visible(&body[start..]);
            if !is_blank(line) {
                out.push(lossy(line));
            }
            rest = &body[..start];
        }
        for line in self.carry.iter().rev() {
            if out.len() >= n {
                break;
            }
            out.push(lossy(line));
        }
        out.reverse();
        out
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(CARRY_LINE)]).into_owned()
}

fn is_blank(b: &[u8]) -> bool {
    b.iter().all(|c| c.is_ascii_whitespace())
}

/// The last non-blank `\r`-segment of a line: what a terminal shows of a tqdm bar.
pub fn visible(raw: &[u8]) -> &[u8] {
    if memchr::memchr(b'\r', raw).is_none() {
        return raw;
    }
    raw.rsplit(|&b| b == b'\r')
        .find(|s| !is_blank(s))
        .unwrap_or(&[])
}

/// Totals of one scan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub bytes: u64,
    pub lines: u64,
}

/// An over-long line, cut down as it streams: the head of its last visible segment.
struct LongLine {
    kept: Vec<u8>,
    cur: Vec<u8>,
    cur_blank: bool,
}

impl LongLine {
    fn new() -> Self {
        LongLine {
            kept: Vec::new(),
            cur: Vec::new(),
            cur_blank: true,
        }
    }

    fn push(&mut self, mut data: &[u8]) {
        while let Some(i) = data.iter().position(|&b| b == b'\r') {
            self.extend(&data[..i]);
            self.close_segment();
            data = &data[i + 1..];
        }
        self.extend(data);
    }

    fn extend(&mut self, d: &[u8]) {
        let room = MAX_LINE.saturating_sub(self.cur.len());
        self.cur.extend_from_slice(&d[..d.len().min(room)]);
        if !is_blank(d) {
            self.cur_blank = false;
        }
    }

    fn close_segment(&mut self) {
        if self.cur_blank {
            self.cur.clear();
        } else {
            self.kept = std::mem::take(&mut self.cur);
        }
        self.cur_blank = true;
    }

    fn finish(mut self) -> Vec<u8> {
        self.close_segment();
        self.kept
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const NEWLINES: u64 = ONES * b'\n' as u64;

/// The high bit of every byte of `w` that is `\n`, and no other bit. The classic zero-byte
/// test on `w ^ NEWLINES`, in the form that is exact (no borrow runs into the next byte).
#[inline]
fn newline_bits(w: u64) -> u64 {
    let x = w ^ NEWLINES;
    !(((x & LOW7).wrapping_add(LOW7)) | x | LOW7)
}

#[inline]
fn word(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().expect("8 bytes"))
}

/// How many `\n` bytes `b` holds, eight bytes at a time.
fn count_newlines(b: &[u8]) -> u64 {
    let mut words = b.chunks_exact(8);
    let mut n = 0u64;
    for w in &mut words {
        // One multiplication adds up the marks (at most 8, so no overflow).
        n += (newline_bits(word(w)) >> 7).wrapping_mul(ONES) >> 56;
    }
    n + words.remainder().iter().filter(|&&c| c == b'\n').count() as u64
}

/// The first `\n` in `b`, eight bytes at a time (tqdm lines are long).
fn find_newline(b: &[u8]) -> Option<usize> {
    let mut words = b.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let bits = newline_bits(word(w));
        if bits != 0 {
            return Some(at + (bits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&c| c == b'\n')
        .map(|i| at + i)
}

/// The last `\n` in `b`, eight bytes at a time.
fn rfind_newline(b: &[u8]) -> Option<usize> {
    let words = b.rchunks_exact(8);
    let head = words.remainder();
    let mut end = b.len();
    for w in words {
        let bits = newline_bits(word(w));
        end -= 8;
        if bits != 0 {
            return Some(end + 7 - (bits.leading_zeros() / 8) as usize);
        }
    }
    head.iter().rposition(|&c| c == b'\n')
}

fn read_some(reader: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match reader.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Where a regex next hits at or after the point it was searched from. Kept while the scan
/// walks through the lines before that hit, so the same bytes are not searched again.
#[derive(Clone, Copy)]
struct Next {
    from: usize,
    at: Option<usize>,
}

impl Next {
    /// The end of the first hit at or after `pos` (a line start).
    fn find(
        slot: &mut Option<Next>,
        pos: usize,
        search: impl FnOnce() -> Option<usize>,
    ) -> Option<usize> {
        if let Some(n) = *slot
            && pos >= n.from
            && n.at.is_none_or(|at| at >= pos)
        {
            return n.at;
        }
        let at = search();
        *slot = Some(Next { from: pos, at });
        at
    }
}

/// The scanner's state between buffers.
struct Scan<'s> {
    prefilter: &'s Prefilter,
    mode: Mode,
    sink: &'s mut dyn Sink,
    carry: VecDeque<Vec<u8>>,
    lines: u64,
}

impl Scan<'_> {
    fn wants_all(&self) -> bool {
        self.mode == Mode::EveryLine || self.sink.every_line()
    }

    /// Whether a line without a needle in its raw bytes has one in the text the sink sees.
    fn joined_needle(&self, line: &[u8]) -> bool {
        self.prefilter.joins.may_join(line) && self.prefilter.hits(self.sink.text(line).as_bytes())
    }

    /// A line that does not sit in a buffer region (over-long, or the last one).
    fn single(&mut self, line: &[u8]) {
        self.lines += 1;
        if self.wants_all() || self.prefilter.hits(line) || self.joined_needle(line) {
            let before = Before {
                region: &[],
                carry: &self.carry,
            };
            self.sink.line(line, self.lines, &before);
        }
        self.remember(std::iter::once(line));
    }

    /// Keeps the last non-blank lines for [`Before`].
    fn remember<'a>(&mut self, newest_first: impl Iterator<Item = &'a [u8]>) {
        let mut recent: Vec<Vec<u8>> = Vec::new();
        for line in newest_first {
            let v = visible(line);
            if is_blank(v) {
                continue;
            }
            recent.push(v[..v.len().min(CARRY_LINE)].to_vec());
            if recent.len() == CARRY {
                break;
            }
        }
        for line in recent.into_iter().rev() {
            if self.carry.len() == CARRY {
                self.carry.pop_front();
            }
            self.carry.push_back(line);
        }
    }

    /// Complete lines (`region` ends with `\n`).
    fn region(&mut self, region: &[u8]) {
        let mut pos = 0;
        // The next hit of each needle set, each searched again only once passed.
        let mut hits: Vec<Option<Next>> = vec![None; self.prefilter.sets()];
        let mut glues = None;
        let mut hit_line: Option<(usize, usize)> = None;
        while pos < region.len() {
            let (start, end) = if self.wants_all() {
                let end = pos + find_newline(&region[pos..]).unwrap_or(0);
                (pos, end)
            } else {
                // Only the line a hit is on matters (needles hold no newline): each set's
                // first hit at or after `pos` gives it.
                let prefilter = self.prefilter;
                let bars = self.sink.wants_bars();
                let hit = hits
                    .iter_mut()
                    .enumerate()
                    .filter(|(set, _)| bars || Some(*set) != prefilter.bar_set())
                    .filter_map(|(set, slot)| {
                        Next::find(slot, pos, || prefilter.hit_at(set, region, pos))
                    })
                    .min();
                let start_of =
                    |at: usize| rfind_newline(&region[pos..at]).map_or(pos, |i| pos + i + 1);
                // Before the hit line: a line where normalising may join a needle together
                // (an escape code; a glued timestamp). The escape search stops at the hit line,
                // so a log with colour codes on every line is not searched twice.
                // Where the hit's line starts, kept with the hit: many joiner lines before one
                // long hit line must not each search back through it.
                let hit_start = match (hit, hit_line) {
                    (Some(h), Some((at, start))) if at == h => Some(start),
                    (Some(h), _) => {
                        let start = start_of(h);
                        hit_line = Some((h, start));
                        Some(start)
                    }
                    (None, _) => None,
                };
                let limit = hit_start.unwrap_or(region.len());
                let escape = memchr::memchr(0x1b, &region[pos..limit]).map(|i| pos + i + 1);
                let glue = Next::find(&mut glues, pos, || {
                    self.prefilter.joins.glue_at(region, pos)
                })
                .filter(|&g| g < limit);
                let joiner = escape.into_iter().chain(glue).min();
                let Some(at) = joiner.or(hit) else {
                    self.lines += count_newlines(&region[pos..]);
                    break;
                };
                let start = match (joiner, hit_start) {
                    (None, Some(s)) => s,
                    _ => start_of(at),
                };
                let end = at + find_newline(&region[at..]).unwrap_or(0);
                self.lines += count_newlines(&region[pos..start]);
                if joiner.is_some() && !self.joined_needle(&region[start..end]) {
                    self.lines += 1;
                    pos = end + 1;
                    continue;
                }
                (start, end)
            };
            self.lines += 1;
            let before = Before {
                region: &region[..start],
                carry: &self.carry,
            };
            self.sink.line(&region[start..end], self.lines, &before);
            pos = end + 1;
        }
        let lines = region[..region.len() - 1].rsplit(|&b| b == b'\n');
        self.remember(lines);
    }
}

/// Reads `reader` to the end, handing lines to `sink`; returns the totals and the last lines
/// of the log (for a sink that must look at how it ends).
pub fn scan(
    reader: &mut dyn Read,
    prefilter: &Prefilter,
    mode: Mode,
    sink: &mut dyn Sink,
) -> io::Result<(Stats, Vec<String>)> {
    let mut buf = vec![0u8; BUF];
    let mut filled = 0;
    let mut bytes = 0u64;
    let mut long: Option<LongLine> = None;
    let mut scan = Scan {
        prefilter,
        mode,
        sink,
        carry: VecDeque::new(),
        lines: 0,
    };
    loop {
        let n = read_some(reader, &mut buf[filled..])?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        filled += n;
        let Some(last) = rfind_newline(&buf[..filled]) else {
            if filled == BUF {
                long.get_or_insert_with(LongLine::new).push(&buf[..filled]);
                filled = 0;
            }
            continue;
        };
        let mut start = 0;
        if let Some(mut l) = long.take() {
            let nl = find_newline(&buf[..filled]).expect("a newline");
            l.push(&buf[..nl]);
            scan.single(&l.finish());
            start = nl + 1;
        }
        if start <= last {
            scan.region(&buf[start..=last]);
        }
        buf.copy_within(last + 1..filled, 0);
        filled -= last + 1;
    }
    if long.is_some() || filled > 0 {
        let line = match long.take() {
            Some(mut l) => {
                l.push(&buf[..filled]);
                l.finish()
            }
            None => buf[..filled].to_vec(),
        };
        scan.single(&line);
    }
    let tail = Before {
        region: &[],
        carry: &scan.carry,
    }
    .last(CARRY);
    Ok((
        Stats {
            bytes,
            lines: scan.lines,
        },
        tail,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what it is given; asks for every line after a line that says `ALL`.
    #[derive(Default)]
    struct Record {
        lines: Vec<(u64, String)>,
        befores: Vec<Vec<String>>,
        all: bool,
    }

    impl Sink for Record {
        fn every_line(&self) -> bool {
            self.all
        }
        fn line(&mut self, raw: &[u8], number: u64, before: &Before<'_>) {
            let text = String::from_utf8_lossy(raw).into_owned();
            self.all = text.contains("ALL");
            self.lines.push((number, text));
            self.befores.push(before.last(2));
        }
    }

    fn run(data: &[u8], mode: Mode) -> (Record, Stats, Vec<String>) {
        let needle = |t: &str| super::super::prefilter::Needle {
            text: t.to_string(),
            case_insensitive: false,
        };
        let re = Prefilter::new(&[needle("HIT"), needle("ALL")]);
        let mut rec = Record::default();
        let (stats, tail) = scan(&mut io::Cursor::new(data.to_vec()), &re, mode, &mut rec).unwrap();
        (rec, stats, tail)
    }

    #[test]
    fn prefilter_hits_with_numbers_and_context() {
        let data = b"a\nb\n\nHIT one\nc\nALL\nd\ne\nHIT two\r\nlast";
        let (rec, stats, tail) = run(data, Mode::Prefilter);
        let got: Vec<(u64, &str)> = rec.lines.iter().map(|(n, t)| (*n, t.as_str())).collect();
        assert_eq!(
            got,
            [(4, "HIT one"), (6, "ALL"), (7, "d"), (9, "HIT two\r")]
        );
        assert_eq!(rec.befores[0], ["a", "b"]);
        assert_eq!(rec.befores[3], ["d", "e"]);
        assert_eq!(
            stats,
            Stats {
                bytes: data.len() as u64,
                lines: 10
            }
        );
        assert_eq!(tail.last().unwrap(), "last");
        let (every, stats2, _) = run(data, Mode::EveryLine);
        assert_eq!(every.lines.len(), 10);
        assert_eq!(stats2, stats);
    }

    #[test]
    fn progress_bars_and_over_long_lines_stay_bounded() {
        // A bar redrawn far past the buffer size, then a normal line.
        let mut data = Vec::new();
        for i in 0..200_000 {
            data.extend_from_slice(format!("\r{:3}%|#####| {i}/200000 HIT", i % 100).as_bytes());
        }
        data.extend_from_slice(b"\r\nnext HIT\n");
        // A line of 3 MiB without any \r.
        data.extend_from_slice(b"HIT ");
        data.extend(std::iter::repeat_n(b'x', 3 << 20));
        data.extend_from_slice(b"\nend HIT");
        let (rec, stats, _) = run(&data, Mode::Prefilter);
        assert_eq!(rec.lines.len(), 4);
        assert!(
            rec.lines[0].1.ends_with("199999/200000 HIT"),
            "{}",
            &rec.lines[0].1
        );
        assert!(rec.lines[0].1.len() < 100);
        assert_eq!(rec.lines[1], (2, "next HIT".to_string()));
        assert_eq!(rec.lines[2].1.len(), MAX_LINE);
        assert_eq!(rec.lines[3], (4, "end HIT".to_string()));
        assert_eq!(stats.lines, 4);
    }

    #[test]
    fn newline_search() {
        for len in 0..40 {
            for at in 0..len {
                for other in [None, Some((at + 5) % len.max(1))] {
                    let mut data = vec![b'x'; len];
                    data[at] = b'\n';
                    if let Some(o) = other {
                        data[o] = b'\n';
                    }
                    assert_eq!(find_newline(&data), data.iter().position(|&c| c == b'\n'));
                    assert_eq!(rfind_newline(&data), data.iter().rposition(|&c| c == b'\n'));
                }
            }
            let plain = vec![0x8au8; len];
            assert_eq!(find_newline(&plain), None, "0x8a is not a newline");
            assert_eq!(rfind_newline(&plain), None);
        }
    }

    #[test]
    fn newline_counts() {
        for len in [0, 1, 31, 32, 33, 8159, 8160, 8161, 100_000] {
            let data: Vec<u8> = (0..len)
                .map(|i| if i % 7 == 0 { b'\n' } else { b'x' })
                .collect();
            let naive = data.iter().filter(|&&c| c == b'\n').count() as u64;
            assert_eq!(count_newlines(&data), naive, "{len}");
        }
        let all = vec![b'\n'; 300_000];
        assert_eq!(count_newlines(&all), 300_000);
    }

    #[test]
    fn visible_segments() {
        assert_eq!(visible(b"plain"), b"plain");
        assert_eq!(visible(b" 5%|\r 10%|x\r"), b" 10%|x");
        assert_eq!(visible(b"\r\r"), b"");
    }
}
