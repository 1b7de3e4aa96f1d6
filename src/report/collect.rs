//! What goes into a bundle, read as recorded: every file of the runs and of the session,
//! bounded (a log's head and tail with the middle cut, a samples file thinned), the machine's
//! facts as the failing run recorded them, and the pictures (a timeline per run, the run
//! matrix of a bisect).

use super::pack::STEPS;
use super::redact::{Redactions, Redactor};
use super::source::{RunDir, Source, SourceKind};
use super::{Content, Entry, Request, inside, issue, plot, samples};
use crate::classify::normalize::strip_ansi;
use crate::machine::{self, Environment, Inputs, RunFacts};
use crate::run::folder;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The most of the failing run's log that is read (its start and, mostly, its end): ISSUE.md
/// quotes from it. Other logs are read only as far as the bundle keeps them.
const PRIMARY_LOG_HEAD: usize = 4 << 20;
const PRIMARY_LOG_TAIL: usize = 12 << 20;

/// The largest samples file read (an hour at 10 ms is about 40 MiB).
const MAX_CSV: u64 = 512 << 20;

/// A run file as read for the bundle.
pub(super) enum FileText {
    Json(Value),
    Text(String),
}

/// Reads one file of a run, inside the folder only and with bounded memory: JSON as JSON (a
/// torn one as text), a log's head and tail with the middle cut, the rest as text.
pub(super) fn file_text(
    root: &Path,
    path: &Path,
    name: &str,
    primary: bool,
) -> Result<FileText, inside::Skipped> {
    if name.ends_with(".json") {
        let bytes = inside::read(root, path, inside::MAX_JSON)?;
        return Ok(match serde_json::from_slice(&bytes) {
            Ok(v) => FileText::Json(v),
            Err(_) => FileText::Text(String::from_utf8_lossy(&bytes).into_owned()),
        });
    }
    if name.ends_with(".log") {
        let (head, tail) = match primary {
            true => (PRIMARY_LOG_HEAD, PRIMARY_LOG_TAIL),
            false => (STEPS[0].log_head, STEPS[0].log_tail),
        };
        return Ok(FileText::Text(log_text(inside::read_log(
            root, path, head, tail,
        )?)));
    }
    let bytes = inside::read(root, path, MAX_CSV)?;
    Ok(FileText::Text(String::from_utf8_lossy(&bytes).into_owned()))
}

/// A log as the bundle holds it: its ends, the cut marked, colour codes removed.
fn log_text(log: inside::LogEnds) -> String {
    let mut text = plain_log(&String::from_utf8_lossy(&log.head));
    if let Some(cut) = log.cut {
        text.push_str(&format!("… [{cut}{TRIM_MARKER}\n"));
        text.push_str(&plain_log(&String::from_utf8_lossy(&log.tail)));
    }
    text
}

/// ComfyUI's log piped in (`report --log -`), kept as a log file of the bundle is.
pub(super) fn stdin_log_text() -> std::io::Result<String> {
    let ends = inside::read_log_from(std::io::stdin().lock(), PRIMARY_LOG_HEAD, PRIMARY_LOG_TAIL)?;
    Ok(log_text(ends))
}

/// A log with its colour codes removed (they are noise in an editor and on GitHub).
fn plain_log(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        out.push_str(&strip_ansi(line));
    }
    out
}

/// Where ComfyUI lives, as the run's log shows it: the folder above `custom_nodes/` in the
/// import-times block or in a traceback, when it still holds `main.py`.
pub(super) fn install_from_log(log: &str) -> Option<PathBuf> {
    for line in log.lines() {
        for sep in ["/custom_nodes/", "\\custom_nodes\\"] {
            let Some(i) = line.find(sep) else { continue };
            let head = &line[..i];
            let start = head
                .rfind(['"', '\'', ' ', '\t'])
                .map(|j| j + 1)
                .unwrap_or(0);
            let dir = PathBuf::from(&head[start..]);
            if dir.is_absolute() && dir.join("main.py").is_file() {
                return Some(dir);
            }
        }
    }
    None
}

/// The end of the marker [`trim_middle`] leaves.
const TRIM_MARKER: &str = " lines trimmed by vrambisect report to keep the bundle small] …";

/// The number of lines a marker in `text` says were cut.
pub(super) fn marker_count(text: &str) -> Option<usize> {
    text.lines().find_map(|l| {
        l.strip_prefix("… [")?
            .strip_suffix(TRIM_MARKER)?
            .parse()
            .ok()
    })
}

/// Keeps the start and the end of a long text, with a marker line in between; returns the
/// text and how many lines were cut (counting those an earlier marker in the cut part
/// stood for).
pub(super) fn trim_middle(text: &str, head: usize, tail: usize) -> (String, Option<usize>) {
    if text.len() <= head + tail + 4096 {
        return (text.to_string(), None);
    }
    let mut h = head;
    while !text.is_char_boundary(h) {
        h -= 1;
    }
    let h = text[..h].rfind('\n').map(|i| i + 1).unwrap_or(h);
    let mut t = text.len() - tail;
    while !text.is_char_boundary(t) {
        t += 1;
    }
    let t = text[t..].find('\n').map(|i| t + i + 1).unwrap_or(t);
    let middle = &text[h..t];
    let cut = middle.matches('\n').count() + marker_count(middle).map_or(0, |n| n - 1);
    let mut out = String::with_capacity(h + (text.len() - t) + 80);
    out.push_str(&text[..h]);
    out.push_str(&format!("… [{cut}{TRIM_MARKER}\n"));
    out.push_str(&text[t..]);
    (out, Some(cut))
}

/// Where ComfyUI lives, and how that is known.
fn comfyui_dir(
    req: &Request,
    src: &Source,
    log: Option<&str>,
) -> (Option<(PathBuf, String)>, Option<String>) {
    if let Some(d) = &req.comfyui {
        return (Some((d.clone(), "--comfyui".into())), None);
    }
    // A bisect's session.json, or a regress's.
    let regress = src.regress.as_ref().and_then(|r| r.spec.as_ref());
    if let Some(dir) = src
        .spec
        .as_ref()
        .map(|s| &s.comfyui)
        .or(regress.map(|s| &s.comfyui))
    {
        return (Some((dir.clone(), "session.json".into())), None);
    }
    if let Some(d) = log.and_then(install_from_log) {
        return (Some((d, "the run's log (custom node paths)".into())), None);
    }
    (
        None,
        Some("the run folder does not say where ComfyUI is (pass --comfyui DIR)".into()),
    )
}

/// The launcher line of a session, as its file says now.
fn launcher_line(src: &Source) -> Option<(String, String)> {
    let path = src.spec.as_ref()?.launcher.as_ref()?;
    let line = match crate::launcher::read_file(path, &[]) {
        Ok(l) => {
            let mut parts: Vec<String> = Vec::new();
            parts.push(l.python.clone().unwrap_or_else(|| "python".into()));
            parts.extend(l.python_args.iter().cloned());
            parts.push(l.script.clone().unwrap_or_else(|| "main.py".into()));
            parts.extend(l.args.iter().cloned());
            format!("{}: {}", path.display(), crate::text::shell_words(&parts))
        }
        Err(_) => format!("{} (no longer readable)", path.display()),
    };
    Some((line, "session.json (the launcher given to bisect)".into()))
}

/// The failing iteration's end (or the end of the recording) and a label for it.
pub(super) fn failure_mark(d: &RunDir, s: &samples::Samples) -> Option<(f64, String)> {
    let r = d.record.as_ref()?;
    if r.outcome == crate::outcome::Outcome::Pass {
        return None;
    }
    match r
        .iterations
        .iter()
        .find(|i| i.outcome != crate::outcome::Outcome::Pass)
    {
        Some(it) => {
            let t = s
                .mark(&crate::run::folder::Mark::PromptEnd(it.iteration))
                .unwrap_or_else(|| s.end());
            Some((t, format!("{} (prompt {})", it.outcome, it.iteration)))
        }
        None => Some((s.end(), r.outcome.to_string())),
    }
}

/// What goes into the bundle, read as recorded, before any redaction.
pub(super) struct Collected {
    pub(super) entries: Vec<Entry>,
    /// The failing run's whole log (normalised), by run label: ISSUE.md quotes from it.
    pub(super) logs: BTreeMap<String, String>,
    pub(super) samples_by_run: BTreeMap<String, samples::Samples>,
    pub(super) workflow: Option<Value>,
    /// Samples files thinned on reading, and by how much.
    pub(super) thinned: BTreeMap<String, usize>,
    pub(super) warnings: Vec<String>,
}

/// Reads every file of the runs (and of the session) that goes into the bundle.
pub(super) fn collect(src: &Source) -> Collected {
    let mut warnings = Vec::new();
    if let Some(why) = src.incomplete() {
        warnings.push(format!(
            "incomplete session: {why} (ISSUE.md says so at the top)"
        ));
    }
    let mut entries: Vec<Entry> = Vec::new();
    let mut logs: BTreeMap<String, String> = BTreeMap::new();
    let mut samples_by_run: BTreeMap<String, samples::Samples> = BTreeMap::new();
    let mut workflow: Option<Value> = None;
    // Samples files thinned on reading (by how much), so that redaction and packing never
    // handle more than the most generous step keeps; the same for logs, except the failing
    // run's, whose full text ISSUE.md quotes from.
    let mut thinned: BTreeMap<String, usize> = BTreeMap::new();
    let primary_label = src.primary().map(|d| d.label.clone());
    let mut left_out: inside::LeftOut = src.skipped.clone();
    for d in &src.runs {
        // Where the run's files are inside the folder (a lone run is the folder itself).
        let rel = |name: &str| match d.dir.strip_prefix(&src.dir) {
            Ok(p) if !p.as_os_str().is_empty() => format!("{}/{name}", p.display()),
            _ => name.to_string(),
        };
        let (files, skipped) = d.files();
        left_out.extend(skipped.into_iter().map(|(n, why)| (rel(&n), why)));
        for (name, path) in files {
            // The same in every run: kept once, with the failing run.
            if name.starts_with(folder::WORKFLOW_SOURCE) && primary_label.as_ref() != Some(&d.label)
            {
                continue;
            }
            let zip_name = format!("runs/{}/{name}", d.label);
            let primary = name == folder::COMFYUI_LOG && primary_label.as_ref() == Some(&d.label);
            let text = match file_text(&src.dir, &path, &name, primary) {
                Ok(FileText::Json(v)) => {
                    entries.push(Entry {
                        name: zip_name,
                        content: Content::Json(v),
                    });
                    continue;
                }
                Ok(FileText::Text(t)) => t,
                Err(why) => {
                    left_out.push((rel(&name), why));
                    continue;
                }
            };
            let mut text = text;
            if name.ends_with(".log") {
                if primary {
                    logs.insert(d.label.clone(), text.clone());
                }
                text = trim_middle(&text, STEPS[0].log_head, STEPS[0].log_tail).0;
            } else if name == folder::SAMPLES_CSV {
                if let Some(s) = samples::Samples::parse(&text)
                    && s.rows() > 0
                {
                    samples_by_run.insert(d.label.clone(), s);
                }
                let (t, k) = samples::thin_csv(&text, STEPS[0].csv);
                if k > 1 {
                    thinned.insert(zip_name.clone(), k);
                    text = t;
                }
            }
            entries.push(Entry {
                name: zip_name,
                content: Content::Text(text),
            });
        }
        if workflow.is_none() {
            let path = d.dir.join(folder::WORKFLOW);
            match inside::check(&src.dir, &path) {
                Ok(()) => workflow = inside::json(&src.dir, &path),
                Err(why) => left_out.push((rel(folder::WORKFLOW), why)),
            }
        }
    }
    // An image or video the workflow was given as holds the prompt unredacted: not attached.
    if let Some(d) = src.primary()
        && let Ok(entries) = std::fs::read_dir(&d.dir)
        && entries.flatten().any(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(folder::WORKFLOW_SOURCE) && !n.ends_with(".json")
        })
    {
        warnings.push(
            "the image or video the workflow was given as is not attached (its metadata cannot be redacted): workflow.json is the prompt read from it".into(),
        );
    }
    for (name, why) in left_out {
        if why.worth_saying() {
            warnings.push(format!("left out of the bundle: {name} {why}"));
        }
    }
    match &workflow {
        Some(w) => entries.push(Entry {
            name: "workflow.json".into(),
            content: Content::Json(w.clone()),
        }),
        None => warnings.push("no workflow.json was found: attach the workflow yourself".into()),
    }
    if src.kind == SourceKind::Bisect {
        let layout = crate::session::SessionDir::bisect(&src.dir);
        for path in [layout.result(), layout.spec()] {
            if let Some(v) = inside::json(&src.dir, &path) {
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                entries.push(Entry {
                    name: name.unwrap_or_default(),
                    content: Content::Json(v),
                });
            }
        }
        if src.result.is_none() {
            warnings.push(
                "the bisect has no result yet (it was stopped): the bundle shows the runs so far"
                    .into(),
            );
        }
    }

    Collected {
        entries,
        logs,
        samples_by_run,
        workflow,
        thinned,
        warnings,
    }
}

/// The machine facts, preferring what the failing run recorded.
pub(super) fn environment(
    req: &Request,
    src: &Source,
    logs: &BTreeMap<String, String>,
) -> Environment {
    let primary = src.primary();
    let primary_log = primary.and_then(|d| logs.get(&d.label)).map(String::as_str);
    let (comfyui, comfyui_unknown) = comfyui_dir(req, src, primary_log);
    let inputs = Inputs {
        comfyui,
        comfyui_unknown,
        python: req
            .python
            .clone()
            .or_else(|| src.spec.as_ref().and_then(|s| s.python.clone()))
            .or_else(|| Some(src.regress.as_ref()?.spec.as_ref()?.python.clone())),
        run: primary.and_then(|d| {
            Some(RunFacts {
                label: format!("run {}", d.label),
                record: d.record.clone()?,
                summary: inside::json(&src.dir, &d.dir.join(folder::SAMPLES_SUMMARY)),
                // The version lines are in the startup block, near the top.
                log: logs.get(&d.label).map(|l| {
                    l.lines()
                        .take(5000)
                        .map(|x| crate::classify::normalize::normalize(x).text)
                        .collect::<Vec<_>>()
                        .join("\n")
                }),
            })
        }),
        launcher: launcher_line(src),
        launcher_env: src.spec.as_ref().map(|s| s.env.clone()).unwrap_or_default(),
        nvml_lib: req.nvml_lib.clone(),
        ask_python: true,
    };
    let mut env = machine::capture(&inputs);
    if src.kind == SourceKind::Regress {
        // The checkout's commit now is neither end of the regression.
        env.comfyui_git = machine::Item::missing(
            "a regress session ran several commits of the checkout: ISSUE.md lists each, with its runs",
        );
    }
    env
}

/// The pictures: a memory timeline per run, and the run matrix of a bisect. Returns the
/// runs that have a timeline and whether the matrix was drawn.
pub(super) fn pictures(
    src: &Source,
    collected: &mut Collected,
    redactor: Option<&Redactor>,
) -> (Vec<String>, bool) {
    let Collected {
        entries,
        samples_by_run,
        warnings,
        ..
    } = collected;
    let label = |s: &str| match redactor {
        Some(r) => r.text(s, &mut Redactions::new()),
        None => s.to_string(),
    };

    let mut timelines = Vec::new();
    for d in &src.runs {
        let Some(s) = samples_by_run.get(&d.label) else {
            continue;
        };
        let no_gpu = d.record.as_ref().and_then(|r| {
            r.not_sampled()
                .find(|(probe, _)| *probe == "nvml")
                .map(|(_, why)| why.to_string())
        });
        let t = plot::Timeline {
            title: issue::run_label(d),
            samples: s,
            gpu: 0,
            failure: failure_mark(d, s),
            no_gpu_reason: no_gpu,
            label: &label,
        };
        match plot::timeline_png(&t) {
            Ok(png) => {
                entries.push(Entry {
                    name: format!("runs/{}/timeline.png", d.label),
                    content: Content::Png(png),
                });
                timelines.push(d.label.clone());
            }
            Err(e) => warnings.push(format!("run {}: no timeline: {e}", d.label)),
        }
    }
    let mut has_matrix = false;
    if let Some(res) = &src.result
        && !res.configs.is_empty()
    {
        let rows: Vec<plot::MatrixRow> = res
            .configs
            .iter()
            .map(|c| plot::MatrixRow {
                label: label(&c.changes.join(", ")),
                outcome: c.outcome.to_string(),
                runs: c.runs,
                passes: c.passes,
                failures: c.failures,
                unresolved: c.runs.saturating_sub(c.passes + c.failures),
                peak_vram_bytes: c.peak_vram_bytes,
                verdict: res.verdict.flags.as_ref() == Some(&c.flags),
            })
            .collect();
        let kind = res.verdict.kind.as_str();
        let flags = res.verdict.named_flags();
        let title = label(&format!(
            "bisect: {kind} {}",
            flags
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ));
        match plot::matrix_png(&title, &rows) {
            Ok(png) => {
                entries.push(Entry {
                    name: "matrix.png".into(),
                    content: Content::Png(png),
                });
                has_matrix = true;
            }
            Err(e) => warnings.push(format!("no matrix picture: {e}")),
        }
    }

    (timelines, has_matrix)
}
