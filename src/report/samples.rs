//! Reading a run's `samples.csv` back: the series, their values over time, and the event
//! marks (`launch`, `prompt 1 start`, `node 3 KSampler`, `prompt 1 end`).

use crate::run::folder::Mark;

/// The samples of one run, by column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples {
    /// Series names in column order (`gpu0.nvml.used`, `tree.rss`, …).
    pub names: Vec<String>,
    /// Seconds since the sampler started, one per sample row.
    pub t: Vec<f64>,
    /// `values[column][row]`.
    pub values: Vec<Vec<Option<f64>>>,
    /// `(seconds, label)` in file order.
    pub marks: Vec<(f64, String)>,
}

/// Splits one CSV line, honouring `"…"` quoting with `""` escapes.
fn split_csv(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', true) => quoted = false,
            ('"', false) if cur.is_empty() => quoted = true,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    out.push(cur);
    out
}

impl Samples {
    /// Parses the CSV the sampler writes (`t_ms,<series…>,mark`); `None` when it has no
    /// header. Rows that do not parse are skipped (a file cut short by a kill ends anyhow).
    pub fn parse(text: &str) -> Option<Samples> {
        let mut lines = text.lines();
        let header = split_csv(lines.next()?);
        if header.first().map(String::as_str) != Some("t_ms") || header.len() < 2 {
            return None;
        }
        let has_mark = header.last().map(String::as_str) == Some("mark");
        let end = if has_mark {
            header.len() - 1
        } else {
            header.len()
        };
        let names: Vec<String> = header[1..end].to_vec();
        let mut s = Samples {
            values: vec![Vec::new(); names.len()],
            names,
            ..Samples::default()
        };
        for line in lines {
            let cells = split_csv(line);
            let Some(t) = cells.first().and_then(|c| c.parse::<f64>().ok()) else {
                continue;
            };
            let t = t / 1000.0;
            let mark = if has_mark {
                cells.get(end).filter(|m| !m.is_empty())
            } else {
                None
            };
            let row: Vec<Option<f64>> = (1..end)
                .map(|i| cells.get(i).and_then(|c| c.parse::<f64>().ok()))
                .collect();
            if let Some(m) = mark
                && row.iter().all(Option::is_none)
            {
                s.marks.push((t, m.clone()));
                continue;
            }
            s.t.push(t);
            for (col, v) in s.values.iter_mut().zip(row) {
                col.push(v);
            }
        }
        Some(s)
    }

    /// The column of a series.
    pub fn column(&self, name: &str) -> Option<&[Option<f64>]> {
        let i = self.names.iter().position(|n| n == name)?;
        Some(&self.values[i])
    }

    /// Whether a series carried at least one value.
    pub fn has(&self, name: &str) -> bool {
        self.column(name)
            .is_some_and(|c| c.iter().any(Option::is_some))
    }

    /// `(seconds, value)` where the series has a value.
    pub fn points(&self, name: &str) -> Vec<(f64, f64)> {
        self.column(name)
            .map(|c| {
                self.t
                    .iter()
                    .zip(c)
                    .filter_map(|(t, v)| v.map(|v| (*t, v)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `f(a, b)` where both series have a value in the same row (`total - free`).
    pub fn combine(&self, a: &str, b: &str, f: impl Fn(f64, f64) -> f64) -> Vec<(f64, f64)> {
        match (self.column(a), self.column(b)) {
            (Some(ca), Some(cb)) => self
                .t
                .iter()
                .zip(ca.iter().zip(cb))
                .filter_map(|(t, (x, y))| Some((*t, f((*x)?, (*y)?))))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The time of the first such mark.
    pub fn mark(&self, mark: &Mark) -> Option<f64> {
        self.marks
            .iter()
            .find(|(_, l)| Mark::parse(l).as_ref() == Some(mark))
            .map(|(t, _)| *t)
    }

    /// The last time anything was recorded.
    pub fn end(&self) -> f64 {
        let t = self.t.last().copied().unwrap_or(0.0);
        let m = self.marks.last().map(|(t, _)| *t).unwrap_or(0.0);
        t.max(m)
    }

    /// How many sample rows there are.
    pub fn rows(&self) -> usize {
        self.t.len()
    }
}

/// Keeps the header, every mark row and every `k`-th sample row of a samples CSV, so a long
/// recording fits the bundle; returns the text and `k` (1 when nothing was dropped).
pub(crate) fn thin_csv(text: &str, max_bytes: usize) -> (String, usize) {
    if text.len() <= max_bytes {
        return (text.to_string(), 1);
    }
    let k = text.len().div_ceil(max_bytes.max(1));
    let mut out = String::with_capacity(max_bytes + max_bytes / 4);
    let mut sample_row = 0usize;
    for (i, line) in text.lines().enumerate() {
        let is_mark = !line.ends_with(',');
        if i == 0 || is_mark {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        if sample_row.is_multiple_of(k) {
            out.push_str(line);
            out.push('\n');
        }
        sample_row += 1;
    }
    (out, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "t_ms,gpu0.nvml.used,ram.available,mark\n\
        0.500,100,2000,\n\
        1.000,,,launch\n\
        100.250,300,1900,\n\
        150.000,,,\"node 3 KSampler, \"\"big\"\"\"\n\
        200.000,,1800,\n\
        250.0,torn";

    #[test]
    fn parses_samples_and_marks() {
        let s = Samples::parse(CSV).unwrap();
        assert_eq!(s.names, ["gpu0.nvml.used", "ram.available"]);
        assert_eq!(s.rows(), 4);
        assert_eq!(
            s.points("gpu0.nvml.used"),
            [(0.0005, 100.0), (0.10025, 300.0)]
        );
        assert_eq!(s.marks.len(), 2);
        assert_eq!(s.marks[1], (0.15, "node 3 KSampler, \"big\"".to_string()));
        assert_eq!(s.mark(&Mark::Launch), Some(0.001));
        assert!(s.has("ram.available") && !s.has("tree.rss"));
        assert_eq!(
            s.combine("ram.available", "gpu0.nvml.used", |a, b| a - b),
            [(0.0005, 1900.0), (0.10025, 1600.0)]
        );
        assert!((s.end() - 0.25).abs() < 1e-9);
        assert!(Samples::parse("a,b\n1,2\n").is_none());
    }

    #[test]
    fn thinning_keeps_marks_and_the_header() {
        let mut text = String::from("t_ms,x,mark\n");
        for i in 0..1000 {
            text.push_str(&format!("{i}.000,{i},\n"));
            if i % 100 == 0 {
                text.push_str(&format!("{i}.500,,mark {i}\n"));
            }
        }
        let (thin, k) = thin_csv(&text, text.len() / 4);
        assert!(k >= 4, "{k}");
        assert!(thin.len() <= text.len() / 3);
        let s = Samples::parse(&thin).unwrap();
        assert_eq!(s.marks.len(), 10);
        assert_eq!(s.rows(), 1000usize.div_ceil(k));
        assert_eq!(thin_csv("t_ms,x,mark\n", 100), ("t_ms,x,mark\n".into(), 1));
    }
}
