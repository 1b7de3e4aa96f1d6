//! `regress --then-bisect`: once the first bad commit is known, the flags that make it work,
//! found by a bisect of that commit in the same session folder (`bisect/`, its tree exported
//! to `first-bad/` while it runs). `regress --resume` continues either phase: the commits
//! already tested come from the regress journal, the runs of the bisect from its own.

use super::git::CommitInfo;
use super::{RegressResult, Session, tree};
use crate::bisect::command::{NewSession, Request, Session as BisectSession};
use crate::bisect::result::BisectResult;
use crate::bisect::search::Strategy;
use crate::error::Result;

/// After a first bad commit was found: bisects the flags on it and adds what it found to
/// `result` (its statement, `then_bisect`); says so when the first bad commit is not known.
/// True when the bisect stopped before its verdict (the session is then to be resumed).
pub(super) fn follow(s: &mut Session<'_>, result: &mut RegressResult) -> Result<bool> {
    let first_bad = match (&result.first_bad, result.could_be.is_empty()) {
        (Some(fb), true) => fb.clone(),
        _ => {
            result.verdict.statement.push_str(
                " The flags were not bisected: which commit is the first bad one is not known.",
            );
            return Ok(false);
        }
    };
    let failed_log = failed_log(result, &first_bad);
    let b = bisect(s, &first_bad, failed_log)?;
    result.verdict.statement.push(' ');
    result.verdict.statement.push_str(&sentence(&first_bad, &b));
    let stopped = b.verdict.kind == crate::bisect::search::VerdictKind::Incomplete;
    if stopped {
        result.continue_with = Some(super::continue_line(s, crate::locate::Origin::current()));
    }
    result.then_bisect = Some(Box::new(b));
    Ok(stopped)
}

/// The log of the first bad commit's run of the workflow as it is that failed: its failure
/// is on record, so the bisect starts from a shortened run of the flags (`--failed-log`).
fn failed_log(result: &RegressResult, first_bad: &CommitInfo) -> Option<std::path::PathBuf> {
    result
        .tested
        .iter()
        .filter(|t| t.commit == first_bad.commit && t.mark == super::Mark::Bad)
        .filter(|t| t.kind == crate::run::record::RunKind::Full)
        .filter_map(|t| t.runs.last())
        .map(|dir| dir.join(crate::run::folder::COMFYUI_LOG))
        .find(|log| log.is_file())
}

/// Bisects the flags on `first_bad` (or resumes that bisect), with the session's workflow,
/// flags, repeats, quick mode, and the commit's environment when its pins differ.
fn bisect(
    s: &mut Session<'_>,
    first_bad: &CommitInfo,
    failed_log: Option<std::path::PathBuf>,
) -> Result<BisectResult> {
    let layout = crate::session::SessionDir::regress(&s.dir);
    let tree = layout.first_bad_tree();
    tree::prepare(&s.repo, &first_bad.commit, &s.spec.comfyui, &tree)?;
    let requirements = s.repo.show(&first_bad.commit, "requirements.txt");
    let (_, differing) = tree::held(requirements.as_deref(), &s.spec.python);
    let overlay = if differing.is_empty() {
        None
    } else {
        let used = s.environment(&differing)?;
        Some(crate::run::Overlay {
            site: used.site,
            packages: used.packages,
        })
    };
    let inner = layout.then_bisect();
    let dir = inner.root().to_path_buf();
    let resumed = inner.spec().is_file();
    let session = if resumed {
        BisectSession::Resume(dir.clone())
    } else {
        BisectSession::New(Box::new(NewSession {
            comfyui: s.export(&tree, &first_bad.commit),
            workflow: s.spec.workflow.clone(),
            python: Some(s.spec.python.clone()),
            // Read into the flags and environment when the regress began.
            launcher: None,
            base_flags: s.spec.flags.clone(),
            env: s.spec.env.clone(),
            toggles: Vec::new(),
            strategy: Strategy::Adaptive,
            repeat: s.spec.repeat,
            limits: s.spec.limits,
            output: Some(dir.clone()),
            custom_nodes_check: true,
            quick: s.spec.quick,
            overlay,
            first_fix: false,
            failed_log,
        }))
    };
    let req = Request {
        session,
        max_runs: None,
        confidence: s.spec.confidence,
        min_available_ram: None,
        nvml_lib: None,
    };
    (s.progress)(&format!(
        "{} the flags on the first bad commit {} (session {})",
        if resumed {
            "resuming the bisect of"
        } else {
            "bisecting"
        },
        first_bad.short(),
        dir.display()
    ));
    let mut lines = Lines {
        progress: &mut *s.progress,
        pending: Vec::new(),
    };
    let done = crate::bisect::command::run(&req, false, &mut lines).map(|(result, _)| result);
    drop(lines);
    let _ = std::fs::remove_dir_all(&tree);
    done
}

/// The bisect's own messages, passed on line by line as the regress's progress.
struct Lines<'a> {
    progress: &'a mut dyn FnMut(&str),
    pending: Vec<u8>,
}

impl std::io::Write for Lines<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        while let Some(at) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=at).collect();
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end();
            if !text.is_empty() {
                (self.progress)(&format!("bisect: {text}"));
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Lines<'_> {
    fn drop(&mut self) {
        let rest = String::from_utf8_lossy(&self.pending).trim().to_string();
        if !rest.is_empty() {
            (self.progress)(&format!("bisect: {rest}"));
        }
    }
}

/// What the bisect found, as a sentence that follows the regress statement.
fn sentence(first_bad: &CommitInfo, b: &BisectResult) -> String {
    use crate::bisect::search::VerdictKind;
    let runs = crate::text::plural(b.runs_total as usize, "run");
    let at = first_bad.short();
    let flags = |f: &[String]| {
        f.iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    match b.verdict.kind {
        VerdictKind::FixedBy => format!(
            "On {at}, {} fixes it (flag bisect, {runs}).",
            flags(&b.verdict.fixing_flags)
        ),
        VerdictKind::CausedBy => format!(
            "On {at}, {} causes it (flag bisect, {runs}).",
            flags(&b.verdict.culprit_flags)
        ),
        VerdictKind::NoFixFound => format!(
            "On {at}, none of the flags tried fixes it (flag bisect, {runs}; see its table)."
        ),
        VerdictKind::Incomplete => {
            format!("On {at}, the flag bisect stopped before its verdict ({runs} so far).")
        }
        _ => format!("On {at} (flag bisect, {runs}): {}", b.verdict.statement),
    }
}
