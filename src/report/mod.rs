//! `vrambisect report DIR`: a zip bundle for an upstream ComfyUI issue, made from a run
//! folder, or a bisect or regress session folder.
//!
//! The zip's root holds `ISSUE.md` (ComfyUI's bug template, filled in), `README.md` (what
//! each file is), `environment.json`, `workflow.json`, for a bisect `result.json`,
//! `session.json` and `matrix.png`, and `runs/NNN/` with each run's logs, record, history,
//! `/system_stats`, samples (CSV) and `timeline.png`. Every file is redacted by default
//! ([`redact`]); long logs are cut in the middle and long sample files thinned so the zip
//! stays under GitHub's attachment limit.
//!
//! Here: the request, building a bundle and applying redaction to its files. `collect` reads
//! what goes in (the runs' files, the machine's facts, the pictures), `pack` fits it under
//! the size limit and writes the zip, [`source`] opens the folder reported on, [`failure`]
//! builds the bundle of a failure as it happened.

mod collect;
pub(crate) mod environment;
pub(crate) mod failure;
pub(crate) mod inside;
pub(crate) mod issue;
mod pack;
pub mod plot;
pub mod redact;
pub(crate) mod samples;
pub(crate) mod source;

use crate::error::{Error, Result};
use crate::machine::{self, Environment, Inputs};
use crate::output::{Answer, Style};
use collect::{
    Collected, FileText, collect, environment, file_text, install_from_log, pictures, trim_middle,
};
use issue::FileNote;
use pack::{PackFile, Packed, SIZE_LIMIT, STEPS, order, pack, write_file};
use redact::{Identity, Kind, Redactions, Redactor};
use serde::Serialize;
use serde_json::Value;
use source::SourceKind;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

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

#[derive(Debug, Clone)]
struct Entry {
    name: String,
    content: Content,
}

/// The zip's name when `--output` is not given.
fn default_output(src_dir: &Path) -> PathBuf {
    let name = src_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run".into());
    PathBuf::from(format!("vrambisect-report-{name}.zip"))
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

/// The zip's path, checked before any work: a name ending in `.zip`, in a folder that exists
/// (a mistyped folder is said, not made).
fn check_output(output: &Path) -> Result<()> {
    if output.extension().and_then(|e| e.to_str()) != Some("zip") {
        return Err(
            Error::usage(format!("{} does not end in .zip", output.display()))
                .hint("give --output a file name ending in .zip"),
        );
    }
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.is_dir()
    {
        return Err(
            Error::usage(format!("the folder {} does not exist", parent.display()))
                .hint("create it, or give --output a path in a folder that exists"),
        );
    }
    Ok(())
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
    check_output(&output)?;
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
    if let Some(r) = &redactor {
        for name in r.names_in_paths_only() {
            warnings.push(format!(
                "the user name '{name}' is also a word of ComfyUI's code and logs, so it was removed only where it is a folder of a path: look for it in file names and prompts before filing"
            ));
        }
    }

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
    use super::collect::marker_count;
    use super::pack::Limits;
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
