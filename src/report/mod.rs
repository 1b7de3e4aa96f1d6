//! `vrambisect report DIR`: a zip bundle for an upstream ComfyUI issue, made from a run
//! folder or a bisect session folder.
//!
//! The zip's root holds `ISSUE.md` (ComfyUI's bug template, filled in), `README.md` (what
//! each file is), `environment.json`, `workflow.json`, for a bisect `result.json`,
//! `session.json` and `matrix.png`, and `runs/NNN/` with each run's logs, record, history,
//! `/system_stats`, samples (CSV) and `timeline.png`. Every file is redacted by default
//! ([`redact`]); long logs are cut in the middle and long sample files thinned so the zip
//! stays under GitHub's attachment limit.

pub mod environment;
pub mod failure;
pub mod inside;
pub mod issue;
pub mod plot;
pub mod redact;
pub mod samples;
pub mod source;

use crate::classify::normalize::strip_ansi;
use crate::error::{Error, Result, io_error};
use crate::machine::{self, Environment, Inputs, RunFacts};
use crate::output::{Answer, Style};
use crate::run::folder;
use issue::FileNote;
use redact::{Identity, Kind, Redactions, Redactor};
use serde::Serialize;
use serde_json::Value;
use source::{RunDir, Source, SourceKind};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The zip should stay under this (GitHub takes attachments up to 10 MB for images and
/// 25 MB for other files; 10 MB keeps every host happy).
pub const SIZE_LIMIT: u64 = 10_000_000;

/// How much of a long log and a long samples file is kept, from generous to tight; the
/// bundle is rebuilt with the next step while it is over [`SIZE_LIMIT`].
const STEPS: &[Limits] = &[
    Limits {
        log_head: 256 << 10,
        log_tail: 1 << 20,
        csv: 3 << 20,
    },
    Limits {
        log_head: 128 << 10,
        log_tail: 512 << 10,
        csv: 1536 << 10,
    },
    Limits {
        log_head: 64 << 10,
        log_tail: 256 << 10,
        csv: 512 << 10,
    },
    Limits {
        log_head: 32 << 10,
        log_tail: 96 << 10,
        csv: 160 << 10,
    },
];

#[derive(Debug, Clone, Copy)]
struct Limits {
    log_head: usize,
    log_tail: usize,
    csv: usize,
}

/// What `report` is asked to do.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// A run or session folder; `None` with `failure`.
    pub dir: Option<PathBuf>,
    /// A failure as it happened (`--log`, `--workflow`, `--history`): nothing rerun.
    pub failure: Option<failure::FailureFiles>,
    /// The zip to write (default: `vrambisect-report-<folder>.zip` here).
    pub output: Option<PathBuf>,
    /// Redact (default); `false` with `--no-redact`.
    pub redact: bool,
    /// The ComfyUI folder, when the run folder does not say.
    pub comfyui: Option<PathBuf>,
    pub python: Option<PathBuf>,
    pub nvml_lib: Option<PathBuf>,
}

/// One file of the bundle, as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BundleFile {
    pub name: String,
    /// Uncompressed size.
    pub bytes: u64,
    pub redactions: usize,
    /// Trimmed or thinned, in words.
    pub note: Option<String>,
}

/// Redactions of one kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindCount {
    pub kind: Kind,
    pub what: &'static str,
    pub count: usize,
    pub files: Vec<String>,
}

/// What redaction did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Redaction {
    pub enabled: bool,
    pub total: usize,
    pub kinds: Vec<KindCount>,
}

/// ComfyUI's bug report form, where a bundle is filed.
pub const ISSUE_FORM: &str =
    "https://github.com/Comfy-Org/ComfyUI/issues/new?template=bug-report.yml";

/// What was built (`report --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Built {
    pub bundle: PathBuf,
    /// Where to file it (ComfyUI's bug report form).
    pub issue_form: &'static str,
    /// Size of the zip.
    pub bytes: u64,
    pub source_kind: SourceKind,
    pub source_dir: PathBuf,
    pub runs: usize,
    pub files: Vec<BundleFile>,
    pub redaction: Redaction,
    pub warnings: Vec<String>,
}

/// A file's content before packing.
#[derive(Debug, Clone)]
enum Content {
    Text(String),
    Json(Value),
    Png(Vec<u8>),
}

/// A file to pack: its name, its bytes, whether to compress it (PNGs are compressed already).
type PackFile = (String, Vec<u8>, bool);

#[derive(Debug, Clone)]
struct Entry {
    name: String,
    content: Content,
}

/// The most of the failing run's log that is read (its start and, mostly, its end): ISSUE.md
/// quotes from it. Other logs are read only as far as the bundle keeps them.
const PRIMARY_LOG_HEAD: usize = 4 << 20;
const PRIMARY_LOG_TAIL: usize = 12 << 20;
/// The largest samples file read (an hour at 10 ms is about 40 MiB).
const MAX_CSV: u64 = 512 << 20;

/// A run file as read for the bundle.
enum FileText {
    Json(Value),
    Text(String),
}

/// Reads one file of a run, inside the folder only and with bounded memory: JSON as JSON (a
/// torn one as text), a log's head and tail with the middle cut, the rest as text.
fn file_text(
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
        let log = inside::read_log(root, path, head, tail)?;
        let mut text = plain_log(&String::from_utf8_lossy(&log.head));
        if let Some(cut) = log.cut {
            text.push_str(&format!("… [{cut}{TRIM_MARKER}\n"));
            text.push_str(&plain_log(&String::from_utf8_lossy(&log.tail)));
        }
        return Ok(FileText::Text(text));
    }
    let bytes = inside::read(root, path, MAX_CSV)?;
    Ok(FileText::Text(String::from_utf8_lossy(&bytes).into_owned()))
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
pub fn install_from_log(log: &str) -> Option<PathBuf> {
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
fn marker_count(text: &str) -> Option<usize> {
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
pub fn trim_middle(text: &str, head: usize, tail: usize) -> (String, Option<usize>) {
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

/// The zip's name when `--output` is not given.
fn default_output(src_dir: &Path) -> PathBuf {
    let name = src_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run".into());
    PathBuf::from(format!("vrambisect-report-{name}.zip"))
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
    if let Some(spec) = &src.spec {
        return (Some((spec.comfyui.clone(), "session.json".into())), None);
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
fn failure_mark(d: &RunDir, s: &samples::Samples) -> Option<(f64, String)> {
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
struct Collected {
    entries: Vec<Entry>,
    /// The failing run's whole log (normalised), by run label: ISSUE.md quotes from it.
    logs: BTreeMap<String, String>,
    samples_by_run: BTreeMap<String, samples::Samples>,
    workflow: Option<Value>,
    /// Samples files thinned on reading, and by how much.
    thinned: BTreeMap<String, usize>,
    warnings: Vec<String>,
}

/// Reads every file of the runs (and of the session) that goes into the bundle.
fn collect(src: &Source) -> Collected {
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
fn environment(req: &Request, src: &Source, logs: &BTreeMap<String, String>) -> Environment {
    let primary = src.primary();
    let primary_log = primary.and_then(|d| logs.get(&d.label)).map(String::as_str);
    let (comfyui, comfyui_unknown) = comfyui_dir(req, src, primary_log);
    let inputs = Inputs {
        comfyui,
        comfyui_unknown,
        python: req
            .python
            .clone()
            .or_else(|| src.spec.as_ref().and_then(|s| s.python.clone())),
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
    machine::capture(&inputs)
}

/// The redactor of this bundle (none with `--no-redact`): this machine's names, and every
/// user name seen in a home path of what goes in.
fn redactor(req: &Request, entries: &[Entry]) -> Option<Redactor> {
    if req.redact {
        let mut id = Identity::from_machine();
        for e in entries {
            match &e.content {
                Content::Text(t) => id.learn(t),
                Content::Json(v) => id.learn(&v.to_string()),
                Content::Png(_) => {}
            }
        }
        Some(Redactor::new(&id))
    } else {
        None
    }
}

/// The pictures: a memory timeline per run, and the run matrix of a bisect. Returns the
/// runs that have a timeline and whether the matrix was drawn.
fn pictures(
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

/// Every file, redacted, as it will be packed; what was redacted, in all and per file.
fn redact(
    entries: Vec<Entry>,
    redactor: Option<&Redactor>,
    enabled: bool,
) -> (Vec<PackFile>, Redaction, Vec<(String, Redactions)>) {
    let mut per_file: Vec<(String, Redactions)> = Vec::new();
    let mut to_pack: Vec<PackFile> = Vec::new();
    for e in entries {
        let mut tally = Redactions::new();
        let bytes = match e.content {
            Content::Text(t) => match redactor {
                Some(r) => r.text(&t, &mut tally).into_bytes(),
                None => t.into_bytes(),
            },
            Content::Json(mut v) => {
                if let Some(r) = redactor {
                    r.json(&mut v, &mut tally);
                }
                let mut s = serde_json::to_string_pretty(&v).expect("JSON serialises");
                s.push('\n');
                s.into_bytes()
            }
            Content::Png(p) => {
                to_pack.push((e.name, p, false));
                continue;
            }
        };
        per_file.push((e.name.clone(), tally));
        to_pack.push((e.name, bytes, true));
    }
    let mut kinds: BTreeMap<Kind, (usize, Vec<String>)> = BTreeMap::new();
    for (name, tally) in &per_file {
        for (k, n) in tally {
            let entry = kinds.entry(*k).or_default();
            entry.0 += n;
            entry.1.push(name.clone());
        }
    }
    let redaction = Redaction {
        enabled,
        total: kinds.values().map(|(n, _)| n).sum(),
        kinds: kinds
            .iter()
            .map(|(k, (n, files))| KindCount {
                kind: *k,
                what: k.describe(),
                count: *n,
                files: files.clone(),
            })
            .collect(),
    };

    (to_pack, redaction, per_file)
}

/// Builds the bundle and writes the zip: collect what was recorded, capture the machine,
/// draw the pictures, write ISSUE.md, redact every file, pack.
pub fn build(req: &Request) -> Result<Built> {
    if let Some(files) = &req.failure {
        return failure::build(req, files);
    }
    let Some(dir) = &req.dir else {
        return Err(Error::usage("nothing to report on")
            .hint("give the folder of a run or a session, or --log with ComfyUI's log"));
    };
    let src = source::open(dir)?;
    let output = req
        .output
        .clone()
        .unwrap_or_else(|| default_output(&src.dir));
    if output.extension().and_then(|e| e.to_str()) != Some("zip") {
        return Err(
            Error::usage(format!("{} does not end in .zip", output.display()))
                .hint("give --output a file name ending in .zip"),
        );
    }
    let mut collected = collect(&src);
    let env = environment(req, &src, &collected.logs);
    collected.entries.push(Entry {
        name: "environment.json".into(),
        content: Content::Json(serde_json::to_value(&env).expect("environment serialises")),
    });
    let redactor = redactor(req, &collected.entries);
    let (timelines, has_matrix) = pictures(&src, &mut collected, redactor.as_ref());
    let Collected {
        mut entries,
        logs,
        workflow,
        thinned,
        warnings,
        ..
    } = collected;
    // ISSUE.md.
    let issue = issue::issue_md(&issue::IssueInput {
        source: &src,
        env: &env,
        workflow: workflow.as_ref(),
        logs: &logs,
        timelines: &timelines,
        has_matrix,
        redact: req.redact,
    });
    entries.insert(
        0,
        Entry {
            name: "ISSUE.md".into(),
            content: Content::Text(issue),
        },
    );

    finish(
        req,
        &output,
        Finish {
            entries,
            thinned,
            warnings,
            redactor,
            source_kind: src.kind,
            source_dir: src.dir.clone(),
            runs: src.runs.len(),
        },
    )
}

/// What every bundle ends with: its files (ISSUE.md first), and what it is made from.
struct Finish {
    entries: Vec<Entry>,
    thinned: BTreeMap<String, usize>,
    warnings: Vec<String>,
    redactor: Option<Redactor>,
    source_kind: SourceKind,
    source_dir: PathBuf,
    runs: usize,
}

/// Redacts, writes the README, packs within the size limits and writes the zip.
fn finish(req: &Request, output: &Path, f: Finish) -> Result<Built> {
    let Finish {
        entries,
        thinned,
        mut warnings,
        redactor,
        source_kind,
        source_dir,
        runs,
    } = f;
    let (mut to_pack, redaction, per_file) = redact(entries, redactor.as_ref(), req.redact);

    // Pack, tightening the limits while the zip is too big.
    let kinds_text: Vec<(String, usize)> = redaction
        .kinds
        .iter()
        .map(|k| (k.what.to_string(), k.count))
        .collect();
    let readme = |notes: &[FileNote]| {
        let text = issue::readme_md(notes, &kinds_text, req.redact);
        match &redactor {
            Some(r) => r.text(&text, &mut Redactions::new()),
            None => text,
        }
    };
    to_pack.sort_by_key(|(name, _, _)| (order(name), name.clone()));
    let Packed {
        zip,
        files: all,
        notes,
        over,
    } = pack(&to_pack, &thinned, STEPS, SIZE_LIMIT, &readme)
        .map_err(|e| Error::environment(format!("cannot build the zip: {e}")))?;
    if over {
        warnings.push(format!(
            "the bundle is {:.1} MB, over GitHub's 10 MB: attach the biggest logs separately or share the zip another way",
            zip.len() as f64 / 1e6
        ));
    }
    write_file(output, &zip)?;
    let tallies: BTreeMap<&str, usize> = per_file
        .iter()
        .map(|(n, t)| (n.as_str(), t.values().sum()))
        .collect();
    let files = all
        .iter()
        .map(|(name, bytes, _)| BundleFile {
            name: name.clone(),
            bytes: bytes.len() as u64,
            redactions: tallies.get(name.as_str()).copied().unwrap_or(0),
            note: notes.get(name).cloned(),
        })
        .collect();
    Ok(Built {
        issue_form: ISSUE_FORM,
        bundle: crate::paths::canonical(output),
        bytes: zip.len() as u64,
        source_kind,
        source_dir,
        runs,
        files,
        redaction,
        warnings,
    })
}

/// Applies the size limits: logs cut in the middle, samples thinned (`thinned` says by how
/// much a samples file was thinned already). Returns the files and a note per changed file.
fn fit(
    files: &[PackFile],
    thinned: &BTreeMap<String, usize>,
    limits: Limits,
) -> (Vec<PackFile>, BTreeMap<String, String>) {
    let mut notes = BTreeMap::new();
    let out = files
        .iter()
        .map(|(name, bytes, compress)| {
            if name.ends_with(".log") {
                let text = String::from_utf8_lossy(bytes);
                let (t, cut) = trim_middle(&text, limits.log_head, limits.log_tail);
                if let Some(cut) = cut.or_else(|| marker_count(&text)) {
                    notes.insert(
                        name.clone(),
                        format!("trimmed: {cut} lines cut from the middle (marked in the file)"),
                    );
                }
                return (name.clone(), t.into_bytes(), *compress);
            } else if name.ends_with(folder::SAMPLES_CSV) {
                let text = String::from_utf8_lossy(bytes);
                let (t, k) = samples::thin_csv(&text, limits.csv);
                let k = k * thinned.get(name).copied().unwrap_or(1);
                if k > 1 {
                    notes.insert(
                        name.clone(),
                        format!("thinned: every {k}th sample kept, every mark kept (timeline.png uses them all)"),
                    );
                }
                return (name.clone(), t.into_bytes(), *compress);
            }
            (name.clone(), bytes.clone(), *compress)
        })
        .collect();
    (out, notes)
}

/// A packed bundle.
struct Packed {
    zip: Vec<u8>,
    /// Every file as packed, README.md first.
    files: Vec<PackFile>,
    notes: BTreeMap<String, String>,
    /// Still over the limit at the tightest step.
    over: bool,
}

/// Packs with the first step of limits that keeps the zip under `limit` (the last step
/// when none does).
fn pack(
    files: &[PackFile],
    thinned: &BTreeMap<String, usize>,
    steps: &[Limits],
    limit: u64,
    readme: &dyn Fn(&[FileNote]) -> String,
) -> zip::result::ZipResult<Packed> {
    let mut last = None;
    for limits in steps {
        let (fitted, notes) = fit(files, thinned, *limits);
        let text = readme(&files_notes(&fitted, &notes));
        let mut all = vec![("README.md".to_string(), text.into_bytes(), true)];
        all.extend(fitted);
        let zip = write_zip(&all)?;
        let over = zip.len() as u64 > limit;
        last = Some(Packed {
            zip,
            files: all,
            notes,
            over,
        });
        if !over {
            break;
        }
    }
    Ok(last.expect("at least one step"))
}

/// Where a file goes in the zip's listing: the issue first, runs last.
fn order(name: &str) -> usize {
    const FIRST: &[&str] = &[
        "ISSUE.md",
        "README.md",
        "environment.json",
        "workflow.json",
        "result.json",
        "session.json",
        "matrix.png",
    ];
    FIRST.iter().position(|f| *f == name).unwrap_or(FIRST.len())
}

fn files_notes(files: &[PackFile], notes: &BTreeMap<String, String>) -> Vec<FileNote> {
    let mut out = vec![FileNote {
        name: "README.md".into(),
        what: issue::describe_file("README.md"),
    }];
    for (name, _, _) in files {
        let mut what = issue::describe_file(name);
        if let Some(n) = notes.get(name) {
            what = format!("{what} ({n})");
        }
        out.push(FileNote {
            name: name.clone(),
            what,
        });
    }
    out
}

/// Packs the files into a zip in memory (deflate; PNGs stored, they are compressed already).
fn write_zip(files: &[PackFile]) -> zip::result::ZipResult<Vec<u8>> {
    use zip::CompressionMethod;
    use zip::write::SimpleFileOptions;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes, compress) in files {
        let opts = SimpleFileOptions::default()
            .compression_method(if *compress {
                CompressionMethod::Deflated
            } else {
                CompressionMethod::Stored
            })
            .unix_permissions(0o644);
        w.start_file(name.as_str(), opts)?;
        w.write_all(bytes)?;
    }
    Ok(w.finish()?.into_inner())
}

/// Writes beside the target, then renames, so a failed write leaves no half zip.
fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| io_error("create", parent, &e))?;
    }
    let tmp = path.with_extension("zip.part");
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|e| {
        // A full disk or a lost folder: no half-written file is left behind.
        let _ = std::fs::remove_file(&tmp);
        io_error("write", path, &e)
    })
}

fn size(b: u64) -> String {
    if b >= 1_000_000 {
        format!("{:.1} MB", b as f64 / 1e6)
    } else {
        format!("{:.0} KB", (b as f64 / 1e3).ceil())
    }
}

impl Answer for Built {
    /// Prints what was built and what was redacted.
    fn render(&self, style: &Style, out: &mut dyn Write) -> std::io::Result<()> {
        let what = match self.source_kind {
            SourceKind::Run => "a run".to_string(),
            SourceKind::Bisect => format!(
                "a bisect session of {}",
                crate::text::plural(self.runs, "run")
            ),
            SourceKind::Regress => format!(
                "a regress session of {}",
                crate::text::plural(self.runs, "run")
            ),
            SourceKind::Failure => "the failure as it happened (nothing rerun)".to_string(),
        };
        writeln!(
            out,
            "{} {} ({}, {} files) from {what}",
            style.good("wrote"),
            self.bundle.display(),
            size(self.bytes),
            self.files.len()
        )?;
        if !self.redaction.enabled {
            writeln!(
                out,
                "{} nothing was redacted (--no-redact)",
                style.warn("note:")
            )?;
        } else if self.redaction.kinds.is_empty() {
            writeln!(out, "redaction found nothing to remove")?;
        } else {
            writeln!(
                out,
                "redacted {}:",
                crate::text::plural(self.redaction.total, "item")
            )?;
            let width = self
                .redaction
                .kinds
                .iter()
                .map(|k| k.what.chars().count())
                .max()
                .unwrap_or(0);
            for k in &self.redaction.kinds {
                let mut files = k
                    .files
                    .iter()
                    .take(4)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ");
                if k.files.len() > 4 {
                    files.push_str(&format!(" and {} more", k.files.len() - 4));
                }
                writeln!(
                    out,
                    "  {:<width$}  {:>5}  {}",
                    k.what,
                    k.count,
                    style.dim(&files),
                )?;
            }
        }
        for f in &self.files {
            if let Some(n) = &f.note {
                writeln!(out, "{} {}: {n}", style.warn("note:"), f.name)?;
            }
        }
        for w in &self.warnings {
            writeln!(out, "{} {w}", style.warn("warning:"))?;
        }
        writeln!(
            out,
            "next: read ISSUE.md in the zip and check the files, then file it at\n  {ISSUE_FORM}\n  and attach the zip"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimming_keeps_both_ends() {
        let text: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
        let (t, cut) = trim_middle(&text, 10_000, 20_000);
        let cut = cut.unwrap();
        assert!(t.len() < 31_000 + 200);
        assert!(t.starts_with("line 0\n"));
        assert!(t.ends_with("line 99999\n"));
        assert!(t.contains(&format!("… [{cut} lines trimmed")));
        assert_eq!(t.lines().count(), 100_000 - cut + 1);
        let (same, none) = trim_middle("short\n", 10, 10);
        assert_eq!((same.as_str(), none), ("short\n", None));
    }

    #[test]
    fn trimming_twice_counts_every_line_cut() {
        let text: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
        let (once, _) = trim_middle(&text, 10_000, 20_000);
        let (twice, cut) = trim_middle(&once, 2_000, 4_000);
        let cut = cut.unwrap();
        assert_eq!(twice.lines().count(), 100_000 - cut + 1);
        assert_eq!(twice.matches("lines trimmed").count(), 1);
        assert_eq!(marker_count(&twice), Some(cut));
    }

    /// Incompressible log lines (pseudo-random hex).
    fn noise(seed: u64, bytes: usize) -> String {
        let mut x = seed;
        let mut t = String::new();
        while t.len() < bytes {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            t.push_str(&format!(
                "{x:016x}{:016x}\n",
                x.rotate_left(29) ^ 0x9e37_79b9
            ));
        }
        t
    }

    #[test]
    fn packing_tightens_until_the_zip_fits() {
        let files: Vec<PackFile> = (0..6)
            .map(|i| {
                (
                    format!("runs/00{i}/comfyui.log"),
                    noise(i + 1, 60_000).into_bytes(),
                    true,
                )
            })
            .collect();
        let step = |h: usize, t: usize| Limits {
            log_head: h,
            log_tail: t,
            csv: 1 << 20,
        };
        let steps = [
            step(40_000, 40_000),
            step(5_000, 10_000),
            step(1_000, 2_000),
        ];
        let readme = |notes: &[FileNote]| format!("{} files", notes.len());
        let none = BTreeMap::new();
        // Roomy: nothing is cut.
        let p = pack(&files, &none, &steps, 10_000_000, &readme).unwrap();
        assert!(!p.over && p.notes.is_empty());
        assert_eq!(p.files[0].0, "README.md");
        assert_eq!(p.files.len(), 7);
        // The first step is not enough, the second is.
        let p = pack(&files, &none, &steps, 120_000, &readme).unwrap();
        assert!(!p.over, "{}", p.zip.len());
        assert!(p.zip.len() <= 120_000);
        let log = String::from_utf8(p.files[1].1.clone()).unwrap();
        assert!(log.len() < 16_000 + 200, "{}", log.len());
        assert!(p.notes["runs/000/comfyui.log"].starts_with("trimmed: "));
        // Nothing is small enough: the tightest step, flagged.
        let p = pack(&files, &none, &steps, 1_000, &readme).unwrap();
        assert!(p.over);
        assert!(String::from_utf8_lossy(&p.files[1].1).len() < 3_000 + 200);
    }

    #[test]
    fn install_from_a_logged_custom_node_path() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("Comfy UI");
        std::fs::create_dir_all(dir.join("custom_nodes")).unwrap();
        std::fs::write(dir.join("main.py"), "").unwrap();
        let log = format!(
            "Import times for custom nodes:\n   0.0 seconds: {}/custom_nodes/websocket_image_save.py\n",
            dir.display()
        );
        // A folder with a space: the path runs to the start of the line's path.
        assert_eq!(install_from_log(&log), None);
        let dir = tmp.path().join("ComfyUI");
        std::fs::create_dir_all(dir.join("custom_nodes")).unwrap();
        std::fs::write(dir.join("main.py"), "").unwrap();
        let log = format!(
            "  File \"{}/custom_nodes/x/__init__.py\", line 1\n",
            dir.display()
        );
        assert_eq!(install_from_log(&log), Some(dir));
        assert_eq!(install_from_log("nothing here"), None);
    }
}
