//! Streams samples and marks to disk as CSV and JSON lines, in constant memory. Every line is
//! handed to the buffer whole and the buffer is flushed often, so a sampler stopped (or
//! killed) at any moment leaves files that end on a complete line.

use super::probe::SeriesDef;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Longest time a written sample may sit in memory before it reaches the file.
pub const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// What the JSON-lines file's first line says besides the columns.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Header<'a> {
    pub format: &'static str,
    pub started_unix_ms: u64,
    pub interval_ms: f64,
    pub series: &'a [SeriesDef],
}

/// One output file and its reusable line buffer.
struct Out {
    path: PathBuf,
    w: BufWriter<File>,
}

/// The CSV and JSON-lines outputs (either may be absent).
pub struct Writers {
    csv: Option<Out>,
    jsonl: Option<Out>,
    line: String,
    /// `"name":` for each column, JSON-escaped once.
    keys: Vec<String>,
    last_flush: Instant,
    error: Option<String>,
}

/// `t_ms` with microsecond precision: `1234.567`.
fn push_t_ms(line: &mut String, t_us: u64) {
    let mut b = itoa::Buffer::new();
    line.push_str(b.format(t_us / 1000));
    let frac = t_us % 1000;
    line.push('.');
    for zero in [100, 10] {
        if frac < zero {
            line.push('0');
        }
    }
    line.push_str(b.format(frac));
}

/// An integer cell, without the formatting machinery (this runs for every value of every
/// sample).
fn push_int(line: &mut String, v: i64) {
    line.push_str(itoa::Buffer::new().format(v));
}

/// A CSV cell, quoted when it must be.
fn push_csv_text(line: &mut String, s: &str) {
    if s.contains([',', '"', '\n', '\r']) {
        line.push('"');
        line.push_str(&s.replace('"', "\"\""));
        line.push('"');
    } else {
        line.push_str(s);
    }
}

impl Writers {
    /// Creates (truncates) the files; on failure, which file and why.
    pub fn create(
        csv: Option<&Path>,
        jsonl: Option<&Path>,
    ) -> Result<Writers, (PathBuf, std::io::Error)> {
        let open = |p: &Path| -> Result<Out, (PathBuf, std::io::Error)> {
            let f = crate::private::create(p).map_err(|e| (p.to_path_buf(), e))?;
            Ok(Out {
                path: p.to_path_buf(),
                w: BufWriter::with_capacity(64 * 1024, f),
            })
        };
        Ok(Writers {
            csv: csv.map(open).transpose()?,
            jsonl: jsonl.map(open).transpose()?,
            line: String::with_capacity(1024),
            keys: Vec::new(),
            last_flush: Instant::now(),
            error: None,
        })
    }

    /// The first write error, if any; writing stopped at it.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn emit(out: &mut Option<Out>, line: &str, error: &mut Option<String>) {
        if let Some(o) = out
            && let Err(e) = o.w.write_all(line.as_bytes())
        {
            *error = Some(format!("cannot write {}: {e}", o.path.display()));
            *out = None;
        }
    }

    /// Writes the column names (CSV) and the header object (JSON lines).
    pub fn header(&mut self, header: &Header<'_>) {
        self.keys = header
            .series
            .iter()
            .map(|s| format!("{}:", serde_json::Value::from(s.name.as_str())))
            .collect();
        if self.csv.is_some() {
            self.line.clear();
            self.line.push_str("t_ms");
            for s in header.series {
                self.line.push(',');
                push_csv_text(&mut self.line, &s.name);
            }
            self.line.push_str(",mark\n");
            Self::emit(&mut self.csv, &self.line, &mut self.error);
        }
        if self.jsonl.is_some() {
            let mut v = serde_json::to_value(header).unwrap_or_default();
            v["type"] = "header".into();
            self.line = format!("{v}\n");
            Self::emit(&mut self.jsonl, &self.line, &mut self.error);
        }
        self.flush();
    }

    /// Writes one row of values (as many as there are columns).
    pub fn sample(&mut self, t_us: u64, row: &[Option<i64>]) {
        if self.csv.is_some() {
            self.line.clear();
            push_t_ms(&mut self.line, t_us);
            for v in row {
                self.line.push(',');
                if let Some(v) = v {
                    push_int(&mut self.line, *v);
                }
            }
            self.line.push_str(",\n");
            Self::emit(&mut self.csv, &self.line, &mut self.error);
        }
        if self.jsonl.is_some() {
            self.line.clear();
            self.line.push_str("{\"type\":\"sample\",\"t_ms\":");
            push_t_ms(&mut self.line, t_us);
            self.line.push_str(",\"values\":{");
            let mut first = true;
            for (key, v) in self.keys.iter().zip(row) {
                if let Some(v) = v {
                    if !first {
                        self.line.push(',');
                    }
                    first = false;
                    self.line.push_str(key);
                    push_int(&mut self.line, *v);
                }
            }
            self.line.push_str("}}\n");
            Self::emit(&mut self.jsonl, &self.line, &mut self.error);
        }
        if self.last_flush.elapsed() >= FLUSH_EVERY {
            self.flush();
        }
    }

    /// Writes an event mark: a CSV row with only `t_ms` and `mark`, a JSON `mark` line.
    pub fn mark(&mut self, t_us: u64, label: &str) {
        if self.csv.is_some() {
            self.line.clear();
            push_t_ms(&mut self.line, t_us);
            for _ in 0..self.keys.len() {
                self.line.push(',');
            }
            self.line.push(',');
            push_csv_text(&mut self.line, label);
            self.line.push('\n');
            Self::emit(&mut self.csv, &self.line, &mut self.error);
        }
        if self.jsonl.is_some() {
            self.line.clear();
            self.line.push_str("{\"type\":\"mark\",\"t_ms\":");
            push_t_ms(&mut self.line, t_us);
            let _ = writeln!(self.line, ",\"label\":{}}}", serde_json::Value::from(label));
            Self::emit(&mut self.jsonl, &self.line, &mut self.error);
        }
    }

    /// Ends the JSON-lines file with an `end` line and flushes both files.
    pub fn finish(&mut self, t_us: u64, samples: u64) {
        if self.jsonl.is_some() {
            self.line.clear();
            self.line.push_str("{\"type\":\"end\",\"t_ms\":");
            push_t_ms(&mut self.line, t_us);
            let _ = writeln!(self.line, ",\"samples\":{samples}}}");
            Self::emit(&mut self.jsonl, &self.line, &mut self.error);
        }
        self.flush();
    }

    pub fn flush(&mut self) {
        self.last_flush = Instant::now();
        for out in [&mut self.csv, &mut self.jsonl] {
            if let Some(o) = out
                && let Err(e) = o.w.flush()
            {
                self.error
                    .get_or_insert_with(|| format!("cannot write {}: {e}", o.path.display()));
                *out = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_milliseconds_with_three_decimals() {
        for (t_us, want) in [
            (0, "0.000"),
            (5, "0.005"),
            (50, "0.050"),
            (1050, "1.050"),
            (1_234_567, "1234.567"),
            (u64::MAX, "18446744073709551.615"),
        ] {
            let mut s = String::new();
            push_t_ms(&mut s, t_us);
            assert_eq!(s, want);
        }
    }
    use crate::sampler::probe::Unit;

    #[test]
    fn csv_and_jsonl_lines() {
        let dir = tempfile::tempdir().unwrap();
        let (c, j) = (dir.path().join("s.csv"), dir.path().join("s.jsonl"));
        let mut w = Writers::create(Some(&c), Some(&j)).unwrap();
        let series = vec![
            SeriesDef::bytes("gpu0.nvml.used"),
            SeriesDef::new("gpu0.pcie.rx_kbps", Unit::KilobytesPerSecond),
        ];
        w.header(&Header {
            format: "vrambisect samples v1",
            started_unix_ms: 1,
            interval_ms: 100.0,
            series: &series,
        });
        w.sample(0, &[Some(5), None]);
        w.mark(1500, "prompt \"a\", started");
        w.sample(100_250, &[Some(-7), Some(3)]);
        w.finish(100_300, 2);
        let csv = std::fs::read_to_string(&c).unwrap();
        assert_eq!(
            csv,
            "t_ms,gpu0.nvml.used,gpu0.pcie.rx_kbps,mark\n\
             0.000,5,,\n\
             1.500,,,\"prompt \"\"a\"\", started\"\n\
             100.250,-7,3,\n"
        );
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&j)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["type"], "header");
        assert_eq!(lines[0]["series"][1]["unit"], "KB/s");
        assert_eq!(lines[1]["values"]["gpu0.nvml.used"], 5);
        assert!(lines[1]["values"].get("gpu0.pcie.rx_kbps").is_none());
        assert_eq!(lines[2]["label"], "prompt \"a\", started");
        assert_eq!(lines[2]["t_ms"], 1.5);
        assert_eq!(lines[3]["t_ms"], 100.25);
        assert_eq!(lines[4]["type"], "end");
        assert_eq!(lines[4]["samples"], 2);
    }
}
