//! `vrambisect sample`: record memory over time, for a process, a command or the machine,
//! with a live status line and a summary table (or the summary as JSON).

use super::{Sampler, SamplerConfig, SeriesStats, Summary, probe::Unit};
use crate::duration::format_duration;
use crate::error::{Error, Result, exit};
use crate::output::{Answer, Style};
use crate::process::{self, ExitStatus};
use crate::signals::{self, Stop};
use serde::Serialize;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the main loop looks at the command, the signals and the clock.
const POLL: Duration = Duration::from_millis(20);
/// How often the live status line is redrawn.
const REDRAW: Duration = Duration::from_millis(250);
/// How long a command gets between SIGTERM and SIGKILL (a second Ctrl-C cuts it short).
const GRACE: Duration = Duration::from_secs(5);
/// Below this, sampling costs more than it tells.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// What `vrambisect sample` was asked to do.
#[derive(Debug, Clone, Default)]
pub(crate) struct Request {
    pub interval: Duration,
    pub duration: Option<Duration>,
    /// CSV file; the JSON lines go beside it (see [`output_paths`]).
    pub output: Option<PathBuf>,
    pub pid: Option<u32>,
    /// A command to start and follow (program and arguments).
    pub command: Vec<String>,
    pub comfy_url: Option<String>,
    pub cuda: bool,
    pub nvml_lib: Option<PathBuf>,
    /// Draw the one-line status on `err` (only on a terminal, never with `--json`).
    pub live: bool,
    /// The command's stdout goes to our stderr, so stdout holds only the JSON document.
    pub json: bool,
}

/// Why sampling ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StoppedBy {
    Duration,
    CommandExited,
    PidExited,
    Interrupted,
}

/// The command that was followed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CommandReport {
    pub argv: Vec<String>,
    pub pid: u32,
    /// Its exit code, or `None` when a signal ended it (then `signal`).
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Whether vrambisect had to stop it (time up, Ctrl-C).
    pub stopped_by_us: bool,
}

/// `sample --json`: the sampler's summary plus how the run ended.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SampleReport {
    #[serde(flatten)]
    pub summary: Summary,
    pub stopped_by: StoppedBy,
    pub command: Option<CommandReport>,
}

/// The report and the exit status to leave with.
pub(crate) struct Sampled {
    pub report: SampleReport,
    pub exit_code: i32,
}

/// The CSV and JSON-lines paths for `--output FILE`: `FILE` and `FILE` with `.jsonl`
/// (given a `.jsonl` name, the CSV goes beside it with `.csv`).
pub(crate) fn output_paths(file: &Path) -> (PathBuf, PathBuf) {
    if file.extension().is_some_and(|e| e == "jsonl") {
        (file.with_extension("csv"), file.to_path_buf())
    } else {
        (file.to_path_buf(), file.with_extension("jsonl"))
    }
}

/// Starts `argv` in its own process group, so Ctrl-C and the end of sampling reach all of
/// it and nothing else.
fn spawn(argv: &[String], json: bool) -> Result<process::Child> {
    let dir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let spec = process::Spec {
        program: std::ffi::OsStr::new(&argv[0]),
        args: &argv[1..],
        dir: &dir,
        env: &[],
    };
    // `--json` promises one document on stdout: the command's output goes to stderr.
    process::Child::spawn_inherited(&spec, json).map_err(|e| {
        let why = match e.kind() {
            io::ErrorKind::NotFound => "command not found".to_string(),
            io::ErrorKind::PermissionDenied => "permission denied".to_string(),
            _ => e.to_string(),
        };
        Error::usage(format!("cannot run {}: {why}", argv[0]))
    })
}

/// Runs `vrambisect sample`. Notes (unavailable probes) and the live line go to `err`.
pub(crate) fn sample(req: &Request, err: &mut dyn Write) -> Result<Sampled> {
    if req.interval < MIN_INTERVAL {
        return Err(Error::usage(format!(
            "--interval {} is too short",
            format_duration(req.interval)
        ))
        .hint("use 1ms or more"));
    }
    if req.duration.is_some_and(|d| d.is_zero()) {
        return Err(Error::usage("--duration must be above zero"));
    }
    if let Some(pid) = req.pid
        && !process::sys::pid_alive(pid)
    {
        return Err(Error::usage(format!("no process with pid {pid}"))
            .hint("give the pid of a running process, e.g. ComfyUI's python"));
    }
    let (csv, jsonl) = match &req.output {
        Some(f) => {
            let (c, j) = output_paths(f);
            (Some(c), Some(j))
        }
        None => (None, None),
    };
    signals::install();
    let sampler = Sampler::start(SamplerConfig {
        interval: req.interval,
        nvml_lib: req.nvml_lib.clone(),
        cuda: req.cuda,
        comfy_url: req.comfy_url.clone(),
        root_pid: req.pid,
        csv,
        jsonl,
        ..SamplerConfig::default()
    })?;
    let opening = sampler.snapshot().unavailable;
    for u in &opening {
        let _ = writeln!(err, "note: {}: {}", u.probe, u.reason);
    }
    let mut child = if req.command.is_empty() {
        None
    } else {
        match spawn(&req.command, req.json) {
            Ok(c) => {
                sampler.set_root_pid(c.pid);
                Some(c)
            }
            Err(e) => {
                sampler.stop();
                return Err(e);
            }
        }
    };
    let started = Instant::now();
    let mut last_draw: Option<Instant> = None;
    let child_pid = child.as_ref().map(|c| c.pid);
    let mut stopped_by_us = false;
    let mut status: Option<ExitStatus> = None;
    // Stops the command's whole group: SIGTERM, the grace period, SIGKILL.
    let mut stop = |child: &mut Option<process::Child>| {
        if let Some(c) = child.take() {
            status = c.terminate(GRACE).exit;
            stopped_by_us = true;
        }
    };
    let stopped_by = loop {
        if signals::requested() != Stop::No {
            stop(&mut child);
            break StoppedBy::Interrupted;
        }
        if let Some(s) = child.as_ref().and_then(|c| c.try_wait()) {
            if let Some(c) = child.take() {
                c.release();
            }
            status = Some(s);
            break StoppedBy::CommandExited;
        }
        if let Some(pid) = req.pid
            && !process::sys::pid_alive(pid)
        {
            break StoppedBy::PidExited;
        }
        if req.duration.is_some_and(|d| started.elapsed() >= d) {
            stop(&mut child);
            break StoppedBy::Duration;
        }
        if req.live && last_draw.is_none_or(|t| t.elapsed() >= REDRAW) {
            let _ = write!(err, "\r\x1b[2K{}", status_line(&sampler.snapshot()));
            let _ = err.flush();
            last_draw = Some(Instant::now());
        }
        std::thread::sleep(POLL);
    };
    let summary = sampler.stop();
    if req.live {
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
    // Problems found while sampling; the ones found at the start were printed then (the
    // list only grows).
    for u in summary.unavailable.iter().skip(opening.len()) {
        let _ = writeln!(err, "note: {}: {}", u.probe, u.reason);
    }
    drop(child);
    let command = child_pid.map(|pid| CommandReport {
        argv: req.command.clone(),
        pid,
        exit_code: status.and_then(|s| s.code),
        signal: status.and_then(|s| s.signal),
        stopped_by_us,
    });
    // Ctrl-C is how open-ended sampling (no duration, nothing to follow) is meant to end;
    // anywhere else it cut short something that would have ended by itself.
    let open_ended = req.duration.is_none() && req.pid.is_none() && req.command.is_empty();
    let exit_code = match (&command, stopped_by) {
        (_, StoppedBy::Interrupted) if open_ended => exit::OK,
        (_, StoppedBy::Interrupted) => exit::INTERRUPTED,
        (Some(_), _) => status.map_or(exit::FAILED, |s| s.shell_code()),
        (None, _) => exit::OK,
    };
    Ok(Sampled {
        report: SampleReport {
            summary,
            stopped_by,
            command,
        },
        exit_code,
    })
}

/// A value in its series' unit.
pub(crate) fn format_value(unit: Unit, v: i64) -> String {
    match unit {
        Unit::Bytes => crate::text::bytes(v),
        Unit::KilobytesPerSecond => {
            let f = v as f64;
            if f >= 1e6 {
                format!("{:.1} GB/s", f / 1e6)
            } else if f >= 1e3 {
                format!("{:.1} MB/s", f / 1e3)
            } else {
                format!("{v} KB/s")
            }
        }
        Unit::Count => v.to_string(),
    }
}

/// The live status line: time, samples, then the figures that matter most, where present.
pub(crate) fn status_line(s: &Summary) -> String {
    let mut parts = vec![
        format!(
            "sampling {}",
            format_duration(Duration::from_millis(s.duration_ms as u64))
        ),
        format!("{} samples", s.samples),
    ];
    let get = |n: &str| s.get(n);
    for d in &s.devices {
        if let Some(u) = get(&super::series::gpu(d.index, super::series::NVML_USED)) {
            parts.push(format!(
                "gpu{} {} used (peak {})",
                d.index,
                crate::text::bytes(u.last),
                crate::text::bytes(u.max)
            ));
        }
    }
    if let Some(t) = get(super::series::TREE_RSS) {
        parts.push(format!("tree RSS {}", crate::text::bytes(t.last)));
    }
    if let Some(r) = get(super::series::RAM_AVAILABLE) {
        parts.push(format!("RAM available {}", crate::text::bytes(r.last)));
    }
    if let Some(sw) = get(super::series::SWAP_USED).filter(|sw| sw.max > 0) {
        parts.push(format!("swap {}", crate::text::bytes(sw.last)));
    }
    parts.join("  ")
}

fn stat_row(s: &SeriesStats) -> Vec<String> {
    let at = |ms: f64| format_duration(Duration::from_micros((ms * 1000.0) as u64));
    vec![
        s.name.clone(),
        format_value(s.unit, s.min),
        format_value(s.unit, s.max),
        format_value(s.unit, s.last),
        at(s.at_min_ms),
        at(s.at_max_ms),
    ]
}

impl Answer for SampleReport {
    /// The summary for a person: what was sampled, then a table of every series.
    fn render(&self, style: &Style, out: &mut dyn Write) -> io::Result<()> {
        use comfy_table::{CellAlignment, ContentArrangement, Table, presets};
        let s = &self.summary;
        writeln!(
            out,
            "{} {} samples over {} (every {}{})",
            style.bold("Sampled"),
            s.samples,
            format_duration(Duration::from_micros((s.duration_ms * 1000.0) as u64)),
            format_duration(Duration::from_micros((s.interval_ms * 1000.0) as u64)),
            if s.missed_ticks > 0 {
                format!(", {} ticks missed", s.missed_ticks)
            } else {
                String::new()
            }
        )?;
        for d in &s.devices {
            let mut line = format!(
                "  gpu{}  {}",
                d.index,
                d.name.as_deref().unwrap_or("(unnamed GPU)")
            );
            if let Some(t) = d.total_bytes {
                line.push_str(&format!("  {} total", crate::text::bytes(t as i64)));
            }
            if let Some(rv) = d.reserved_bytes {
                line.push_str(&format!(
                    ", {} reserved by the driver",
                    crate::text::bytes(rv as i64)
                ));
            }
            writeln!(out, "{line}")?;
        }
        if let Some(v) = &s.driver_version {
            let cuda = s
                .cuda_driver_version
                .as_deref()
                .map(|c| format!(", CUDA {c}"))
                .unwrap_or_default();
            writeln!(out, "  driver {v}{cuda}")?;
        }
        if let Some(pid) = s.root_pid {
            writeln!(out, "  following process {pid} and its children")?;
        }
        if let Some(b) = s.cuda_context_bytes {
            writeln!(
                out,
                "  {} the own CUDA context held {} of VRAM (inside every nvml.used figure)",
                style.warn("!"),
                crate::text::bytes(b as i64)
            )?;
        }
        for u in &s.unavailable {
            writeln!(out, "  {} {}: {}", style.dim("-"), u.probe, u.reason)?;
        }
        writeln!(out)?;
        if s.series.is_empty() {
            writeln!(out, "No readings.")?;
        } else {
            let mut table = Table::new();
            table
                .load_style(presets::ASCII_MARKDOWN)
                .set_content_arrangement(ContentArrangement::Disabled)
                .set_header(vec!["series", "min", "max", "last", "min at", "max at"]);
            for st in &s.series {
                table.add_row(stat_row(st));
            }
            for i in 1..6 {
                if let Some(c) = table.column_mut(i) {
                    c.set_cell_alignment(CellAlignment::Right);
                }
            }
            writeln!(out, "{table}")?;
        }
        if !s.marks.is_empty() {
            writeln!(out, "\n{} marks", s.marks.len())?;
        }
        for f in [&s.csv, &s.jsonl].into_iter().flatten() {
            writeln!(out, "wrote {}", f.display())?;
        }
        if let Some(e) = &s.write_error {
            writeln!(out, "{} {e}", style.bad("error:"))?;
        }
        if let Some(c) = &self.command {
            let how = match (c.exit_code, c.signal) {
                (Some(code), _) => format!("exited with {code}"),
                (None, Some(sig)) => format!("was killed by signal {sig}"),
                (None, None) => "did not report how it ended".into(),
            };
            let by_us = if c.stopped_by_us {
                " (stopped by vrambisect)"
            } else {
                ""
            };
            writeln!(out, "{} {how}{by_us}", crate::text::shell_words(&c.argv))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_paths_sit_side_by_side() {
        let cases = [
            ("run.csv", "run.csv", "run.jsonl"),
            ("run", "run", "run.jsonl"),
            ("out/run.txt", "out/run.txt", "out/run.jsonl"),
            ("run.jsonl", "run.csv", "run.jsonl"),
        ];
        for (given, csv, jsonl) in cases {
            let (c, j) = output_paths(Path::new(given));
            assert_eq!(
                (c.to_str().unwrap(), j.to_str().unwrap()),
                (csv, jsonl),
                "{given}"
            );
        }
    }

    #[test]
    fn values_read_like_a_person_writes_them() {
        let cases = [
            (Unit::Bytes, 9_663_676_416, "9.00 GiB"),
            (Unit::Bytes, 397_410_304, "379 MiB"),
            (Unit::Bytes, -(1 << 30), "-1.00 GiB"),
            (Unit::Bytes, 2048, "2 KiB"),
            (Unit::Bytes, 12, "12 B"),
            (Unit::KilobytesPerSecond, 5_200_000, "5.2 GB/s"),
            (Unit::KilobytesPerSecond, 12_500, "12.5 MB/s"),
            (Unit::KilobytesPerSecond, 900, "900 KB/s"),
            (Unit::Count, 3, "3"),
        ];
        for (unit, v, want) in cases {
            assert_eq!(format_value(unit, v), want);
        }
    }

    fn stats(name: &str, last: i64, max: i64) -> SeriesStats {
        SeriesStats {
            name: name.into(),
            unit: Unit::Bytes,
            count: 1,
            min: last,
            max,
            last,
            at_min_ms: 0.0,
            at_max_ms: 0.0,
        }
    }

    fn summary(series: Vec<SeriesStats>) -> Summary {
        Summary {
            samples: 12,
            duration_ms: 1234.0,
            interval_ms: 100.0,
            started_unix_ms: 0,
            missed_ticks: 0,
            unavailable: Vec::new(),
            devices: vec![super::super::DeviceInfo {
                index: 0,
                ..Default::default()
            }],
            driver_version: None,
            cuda_driver_version: None,
            series,
            marks: Vec::new(),
            marks_dropped: 0,
            cuda_context_bytes: None,
            root_pid: None,
            comfy_url: None,
            csv: None,
            jsonl: None,
            write_error: None,
        }
    }

    #[test]
    fn the_status_line_shows_what_is_there() {
        let s = summary(vec![
            stats("gpu0.nvml.used", 9 << 30, 10 << 30),
            stats("tree.rss", 3 << 30, 3 << 30),
            stats("ram.available", 20 << 30, 21 << 30),
            stats("swap.used", 0, 0),
        ]);
        assert_eq!(
            status_line(&s),
            "sampling 1.2s  12 samples  gpu0 9.00 GiB used (peak 10.00 GiB)  \
             tree RSS 3.00 GiB  RAM available 20.00 GiB"
        );
        let bare = summary(Vec::new());
        assert_eq!(status_line(&bare), "sampling 1.2s  12 samples");
    }

    #[test]
    fn the_summary_renders_a_markdown_table() {
        let mut s = summary(vec![stats("gpu0.nvml.used", 9 << 30, 10 << 30)]);
        s.unavailable
            .push(super::super::Unavailable::new("cuda", "libcuda not found"));
        let r = SampleReport {
            summary: s,
            stopped_by: StoppedBy::CommandExited,
            command: Some(CommandReport {
                argv: vec!["sleep".into(), "1".into()],
                pid: 42,
                exit_code: Some(0),
                signal: None,
                stopped_by_us: false,
            }),
        };
        let mut out = Vec::new();
        r.render(&Style::plain(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("Sampled 12 samples over 1.2s (every 100ms)\n"),
            "{text}"
        );
        assert!(text.contains("  - cuda: libcuda not found\n"), "{text}");
        assert!(text.contains("| series "), "{text}");
        let row = text
            .lines()
            .find(|l| l.starts_with("| gpu0.nvml.used"))
            .unwrap();
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(
            cells[1..5],
            ["gpu0.nvml.used", "9.00 GiB", "10.00 GiB", "9.00 GiB"]
        );
        assert!(text.ends_with("sleep 1 exited with 0\n"), "{text}");
    }
}
