//! Packing a bundle: the size limits (logs cut in the middle, samples thinned, from generous
//! to tight until the zip is under the limit), the order of the files, the zip, and writing
//! it without leaving half a file behind.

use super::collect::{marker_count, trim_middle};
use super::issue::{self, FileNote};
use super::samples;
use crate::error::{Result, io_error};
use crate::run::folder;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// The zip should stay under this (GitHub takes attachments up to 10 MB for images and
/// 25 MB for other files; 10 MB keeps every host happy).
pub(super) const SIZE_LIMIT: u64 = 10_000_000;

/// How much of a long log and a long samples file is kept, from generous to tight; the
/// bundle is rebuilt with the next step while it is over [`SIZE_LIMIT`].
pub(super) const STEPS: &[Limits] = &[
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
pub(super) struct Limits {
    pub(super) log_head: usize,
    pub(super) log_tail: usize,
    pub(super) csv: usize,
}

/// A file to pack: its name, its bytes, whether to compress it (PNGs are compressed already).
pub(super) type PackFile = (String, Vec<u8>, bool);

/// Applies the size limits: logs cut in the middle, samples thinned (`thinned` says by how
/// much a samples file was thinned already). Returns the files and a note per changed file.
pub(super) fn fit(
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
pub(super) struct Packed {
    pub(super) zip: Vec<u8>,
    /// Every file as packed, README.md first.
    pub(super) files: Vec<PackFile>,
    pub(super) notes: BTreeMap<String, String>,
    /// Still over the limit at the tightest step.
    pub(super) over: bool,
}

/// Packs with the first step of limits that keeps the zip under `limit` (the last step
/// when none does).
pub(super) fn pack(
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
pub(super) fn order(name: &str) -> usize {
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

pub(super) fn files_notes(files: &[PackFile], notes: &BTreeMap<String, String>) -> Vec<FileNote> {
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
pub(super) fn write_zip(files: &[PackFile]) -> zip::result::ZipResult<Vec<u8>> {
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
pub(super) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("zip.part");
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|e| {
        // A full disk or a lost folder: no half-written file is left behind.
        let _ = std::fs::remove_file(&tmp);
        io_error("write", path, &e)
    })
}
