//! Run folders: where a run keeps its logs, samples and record. The file names are defined
//! here and nowhere else; `report` and `bisect` read a run folder through these names.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// ComfyUI's output, both streams merged, as printed.
pub(crate) const COMFYUI_LOG: &str = "comfyui.log";
/// The run's record ([`super::RunRecord`]).
pub(crate) const RECORD: &str = "record.json";
/// The workflow as submitted (API format).
pub(crate) const WORKFLOW: &str = "workflow.json";
/// The shortened prompt a quick run queued (`--quick`), beside the full one.
pub(crate) const WORKFLOW_QUICK: &str = "workflow.quick.json";
/// The file the workflow was given as, kept beside the prompt made from it (a UI-format save,
/// an image or video with the prompt inside): `workflow-source.json`, `workflow-source.png`.
pub(crate) const WORKFLOW_SOURCE: &str = "workflow-source";
/// Memory samples, one row per sample, with event marks.
pub(crate) const SAMPLES_CSV: &str = "samples.csv";
/// The same samples as JSON lines.
pub(crate) const SAMPLES_JSONL: &str = "samples.jsonl";
/// The sampler's summary (peaks, minima, marks).
pub(crate) const SAMPLES_SUMMARY: &str = "samples-summary.json";
/// `GET /system_stats`, fetched before ComfyUI was stopped.
pub(crate) const SYSTEM_STATS: &str = "system_stats.json";

/// ComfyUI's `/history` entry of prompt `n`.
pub(crate) fn history(n: u32) -> String {
    format!("history-{n}.json")
}

/// ComfyUI's answer when it refused prompt `n`.
pub(crate) fn rejected(n: u32) -> String {
    format!("rejected-{n}.json")
}

/// Writes `value` as pretty JSON to `path`; a failed write is an error that names the file
/// (a run whose record is missing must not look like one that happened).
pub(crate) fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::environment(format!("cannot encode {}: {e}", path.display())))?;
    crate::private::write(path, text + "\n").map_err(|e| Error {
        kind: crate::error::ErrorKind::Environment,
        ..crate::error::io_error("write", path, &e)
    })
}

/// A moment of a run marked in its samples (`samples.csv`, the summary's marks): where the
/// report's timelines and the RAM accounting of each prompt are cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// ComfyUI was started.
    Launch,
    /// ComfyUI answered HTTP.
    Ready,
    /// Prompt `n` (1-based) is about to be submitted.
    PromptStart(u32),
    /// Prompt `n` ended (its verdict is known).
    PromptEnd(u32),
    /// A node began executing for the first time in the prompt.
    Node { id: String, class: String },
}

impl std::fmt::Display for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mark::Launch => f.write_str("launch"),
            Mark::Ready => f.write_str("ready"),
            Mark::PromptStart(n) => write!(f, "prompt {n} start"),
            Mark::PromptEnd(n) => write!(f, "prompt {n} end"),
            Mark::Node { id, class } => write!(f, "node {id} {class}"),
        }
    }
}

impl Mark {
    /// Reads a mark's label back; `None` for a label this version does not write.
    pub fn parse(label: &str) -> Option<Mark> {
        match label {
            "launch" => return Some(Mark::Launch),
            "ready" => return Some(Mark::Ready),
            _ => {}
        }
        if let Some(rest) = label.strip_prefix("prompt ") {
            let (n, what) = rest.split_once(' ')?;
            let n = n.parse().ok()?;
            return match what {
                "start" => Some(Mark::PromptStart(n)),
                "end" => Some(Mark::PromptEnd(n)),
                _ => None,
            };
        }
        let (id, class) = label.strip_prefix("node ")?.split_once(' ')?;
        Some(Mark::Node {
            id: id.to_string(),
            class: class.to_string(),
        })
    }
}

/// Creates `dir` for a new run; refuses a folder that already holds files (nothing is ever
/// overwritten).
pub(crate) fn create(dir: &Path) -> Result<PathBuf> {
    if dir.exists() {
        let non_empty = std::fs::read_dir(dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true);
        if non_empty {
            return Err(
                Error::usage(format!("{} already exists and is not empty", dir.display()))
                    .hint("choose another --output folder; vrambisect never overwrites a run"),
            );
        }
    }
    crate::private::create_dir_all(dir)
        .map_err(|e| crate::error::io_error("create run folder", dir, &e))?;
    Ok(crate::paths::canonical(dir))
}

/// A fresh folder name under `parent`: `run-20261129-145700-1a2b`.
pub(crate) fn fresh(parent: &Path, prefix: &str) -> PathBuf {
    let stamp = utc_stamp(SystemTime::now());
    let nonce = std::process::id()
        ^ (SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0));
    parent.join(format!("{prefix}-{stamp}-{:04x}", nonce & 0xffff))
}

/// `20261129-145700` in UTC.
pub(crate) fn utc_stamp(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
}

/// `2026-11-29T14:57:00Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// Days-from-civil inverse (Howard Hinnant's algorithm), UTC.
fn civil(t: SystemTime) -> (i64, u32, u32, u32, u32, u32) {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = if m <= 2 { y + 1 } else { y };
    (
        y,
        m,
        d,
        (rem / 3600) as u32,
        ((rem % 3600) / 60) as u32,
        (rem % 60) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_959_244);
        assert_eq!(rfc3339(t), "2026-11-29T13:34:04Z");
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101-000000");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
    }

    #[test]
    fn marks_read_back_as_they_were_written() {
        let marks = [
            Mark::Launch,
            Mark::Ready,
            Mark::PromptStart(1),
            Mark::PromptEnd(12),
            Mark::Node {
                id: "3".into(),
                class: "KSampler".into(),
            },
            Mark::Node {
                id: "10:2".into(),
                class: "?".into(),
            },
        ];
        for m in marks {
            assert_eq!(Mark::parse(&m.to_string()), Some(m));
        }
        assert_eq!(Mark::PromptEnd(3).to_string(), "prompt 3 end");
        for label in [
            "",
            "prompt x end",
            "prompt 1 middle",
            "node",
            "something else",
        ] {
            assert_eq!(Mark::parse(label), None, "{label}");
        }
    }

    #[test]
    fn never_overwrites() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        create(&dir).unwrap();
        create(&dir).unwrap(); // empty: fine
        std::fs::write(dir.join("record.json"), "{}").unwrap();
        let err = create(&dir).unwrap_err();
        assert!(err.message.contains("not empty"));
    }
}
