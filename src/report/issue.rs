//! `ISSUE.md` in the shape of ComfyUI's bug template (Custom Node Testing, Expected Behavior,
//! Actual Behavior, Steps to Reproduce, Debug Logs, Other: ComfyUI's `.github/ISSUE_TEMPLATE/bug-report.yml`), filled with what
//! maintainers keep asking for in ComfyUI's memory issues: the startup log with the version and aimdo lines, the
//! workflow, versions, the RAM/VRAM timeline, and works-with/fails-without evidence pairs.
//! Also the bundle's `README.md`. Pure: everything comes in through [`IssueInput`]; the
//! caller redacts the text afterwards like every other file.

use super::environment;
use super::source::{RunDir, Source, SourceKind};
use crate::bisect::search::VerdictKind;
use crate::classify::normalize::normalize;
use crate::machine::Environment;
use crate::outcome::Outcome;
use crate::run::RunRecord;
use crate::run::folder;
use crate::text::shell_words;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The longest line quoted in ISSUE.md (tracebacks carry 300-character `^^^^` lines).
const MAX_LINE: usize = 300;
/// Lines of the startup block and of the failure window at most.
const STARTUP_LINES: usize = 50;
const WINDOW_LINES: usize = 110;
/// How far below the first evidence line the failure window reaches (a traceback and
/// torch's memory summary).
const AFTER: usize = 100;

/// What ISSUE.md is written from.
pub(crate) struct IssueInput<'a> {
    pub source: &'a Source,
    pub env: &'a Environment,
    pub workflow: Option<&'a Value>,
    /// Each run's `comfyui.log` (ANSI codes already removed), by run label.
    pub logs: &'a BTreeMap<String, String>,
    /// Run labels that have a `timeline.png`.
    pub timelines: &'a [String],
    pub has_matrix: bool,
    /// Whether the bundle is redacted (values of launcher variables outside the allowlist
    /// are then left out here, where no structure tells them apart afterwards).
    pub redact: bool,
}

/// One log line as a person reads it: level tag kept, colours and redrawn progress gone.
pub(crate) fn log_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|raw| {
            let l = normalize(raw);
            let mut s = match l.level {
                Some(level) => format!("[{}] {}", format!("{level:?}").to_uppercase(), l.text),
                None => l.text,
            };
            if s.chars().count() > MAX_LINE {
                s = s.chars().take(MAX_LINE).collect::<String>() + " …";
            }
            s
        })
        .collect()
}

/// A traceback's lines: indented frames, its header, the exception line, the chaining words.
fn continues_a_record(l: &str) -> bool {
    l.starts_with(char::is_whitespace)
        || l.starts_with("Traceback")
        || l.starts_with("During handling")
        || l.starts_with("The above exception")
        || l.split_once(": ").is_some_and(|(name, _)| {
            !name.contains(' ') && (name.ends_with("Error") || name.ends_with("Exception"))
        })
}

/// Keeps the first and last lines of a long excerpt, with a marker in between.
pub(crate) fn cap_lines(lines: Vec<String>, max: usize) -> Vec<String> {
    if lines.len() <= max {
        return lines;
    }
    let head = max * 2 / 3;
    let tail = max - head - 1;
    let cut = lines.len() - head - tail;
    let mut out: Vec<String> = lines[..head].to_vec();
    out.push(format!("… [{cut} lines trimmed] …"));
    out.extend_from_slice(&lines[lines.len() - tail..]);
    out
}

/// The startup block: everything up to ComfyUI's ready line (the whole log when it never
/// got there).
pub(crate) fn startup_block(lines: &[String]) -> Vec<String> {
    let end = lines
        .iter()
        .position(|l| l.contains("To see the GUI go to"))
        .map(|i| i + 1)
        .unwrap_or(lines.len());
    // A run logged at DEBUG (the bisect's first) would fill the block with DEBUG records
    // (and the tracebacks some of them carry); the bundle's log has them all.
    let mut kept = Vec::new();
    let mut in_debug = false;
    let mut dropped = 0;
    for l in &lines[..end] {
        if l.starts_with("[DEBUG] ") {
            in_debug = true;
        } else if l.starts_with('[') && l.contains("] ") {
            // The next tagged record.
            in_debug = false;
        } else if in_debug && !continues_a_record(l) {
            // An untagged line of its own (comfy-aimdo's `aimdo: …` lines have no tag).
            in_debug = false;
        }
        if in_debug {
            dropped += 1;
        } else {
            kept.push(l.clone());
        }
    }
    if dropped > 0 {
        kept.push(format!(
            "… [{dropped} DEBUG lines left out here; the log in the bundle has them] …"
        ));
    }
    cap_lines(kept, STARTUP_LINES)
}

/// The lines around the failure: from a little before the first evidence line to a little
/// after the last; the end of the log when no evidence line is in it (a hang, a kill).
pub(crate) fn failure_window(lines: &[String], evidence: &[String]) -> Vec<String> {
    let keys: Vec<String> = evidence
        .iter()
        .map(|e| e.trim().chars().take(60).collect::<String>())
        .filter(|k| k.len() >= 12)
        .collect();
    let hits: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| keys.iter().any(|k| l.contains(k.as_str())))
        .map(|(i, _)| i)
        .collect();
    let ready = lines
        .iter()
        .position(|l| l.contains("To see the GUI go to"))
        .map(|i| i + 1)
        .unwrap_or(0);
    let Some(&first) = hits.first() else {
        let start = lines.len().saturating_sub(40).max(ready.min(lines.len()));
        return lines[start..].to_vec();
    };
    // The window is measured from the first evidence line only: which later lines make it
    // into the evidence depends on when the run's verdict was taken (ComfyUI's "Got an OOM"
    // can come after it), and the excerpt should not.
    // A Python error starts at ComfyUI's "!!! Exception during processing !!!" line, even
    // when only the traceback's last line made it into the evidence.
    let first = lines[..first]
        .iter()
        .rposition(|l| l.contains("!!! Exception during processing"))
        .filter(|&i| first - i <= 80)
        .unwrap_or(first);
    let start = first.saturating_sub(25).max(ready.min(first));
    let end = (first + AFTER).min(lines.len());
    let mut out = cap_lines(lines[start..end].to_vec(), WINDOW_LINES);
    // Evidence far below the window (a second error much later) gets its own few lines.
    if let Some(&last) = hits.last()
        && last >= end + 20
    {
        let from = last.saturating_sub(10).max(end);
        if from > end {
            out.push(format!("… [{} lines] …", from - end));
        }
        out.extend_from_slice(&lines[from..(last + 12).min(lines.len())]);
    }
    out
}

/// `7 nodes: CheckpointLoaderSimple, CLIPTextEncode ×2, …` in node-id order.
pub(crate) fn workflow_summary(wf: &Value) -> String {
    let Some(map) = wf.as_object() else {
        return "not an API-format workflow".into();
    };
    let mut ids: Vec<&String> = map.keys().collect();
    ids.sort_by_key(|k| (k.parse::<u64>().unwrap_or(u64::MAX), k.to_string()));
    let mut classes: Vec<(String, usize)> = Vec::new();
    for id in ids {
        let class = map[id]
            .get("class_type")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        match classes.iter_mut().find(|(c, _)| *c == class) {
            Some((_, n)) => *n += 1,
            None => classes.push((class, 1)),
        }
    }
    let list: Vec<String> = classes
        .into_iter()
        .map(|(c, n)| if n > 1 { format!("{c} ×{n}") } else { c })
        .collect();
    format!("{} nodes: {}", map.len(), list.join(", "))
}

/// Flags for a table cell: `(none)` or the flags in code.
fn flags_text(flags: &[String]) -> String {
    if flags.is_empty() {
        "(none)".into()
    } else {
        code(&shell_words(flags))
    }
}

/// Flags in a sentence: `no flags` or ``flags `--x` ``.
fn flags_phrase(flags: &[String]) -> String {
    if flags.is_empty() {
        "no flags".into()
    } else {
        format!("flags {}", code(&shell_words(flags)))
    }
}

fn code(s: &str) -> String {
    // A backtick inside inline code would end it.
    if s.contains('`') {
        format!("`` {s} ``")
    } else {
        format!("`{s}`")
    }
}

use crate::text::gib_or_dash as gib;

fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// `python main.py FLAGS` as the user would type it (the tool's own `--listen`/`--port`
/// additions left out).
fn user_line(r: &RunRecord) -> String {
    let mut s = "python main.py".to_string();
    if !r.flags.is_empty() {
        s.push(' ');
        s.push_str(&shell_words(&r.flags));
    }
    s
}

fn exact_line(r: &RunRecord) -> String {
    format!("python {}", shell_words(&r.argv))
}

/// The first iteration that did not pass, with where it failed.
fn failed_at(r: &RunRecord, wf: Option<&Value>) -> Option<String> {
    let it = r.iterations.iter().find(|i| i.outcome != Outcome::Pass)?;
    let mut s = format!(
        "prompt {} of {}: {}",
        it.iteration,
        r.iterations.len(),
        it.outcome.describe()
    );
    if let Some(node) = it.nodes_executed.last() {
        let class = wf
            .and_then(|w| w.get(node))
            .and_then(|n| n.get("class_type"))
            .and_then(Value::as_str);
        let _ = match class {
            Some(c) => write!(s, " in node {node} ({c})"),
            None => write!(s, " in node {node}"),
        };
    }
    let _ = write!(s, " after {}", secs(it.duration_ms));
    Some(s)
}

fn effective_line(r: &RunRecord) -> String {
    let e = &r.effective;
    let mut parts = Vec::new();
    if let Some(d) = e.dynamic_vram {
        parts.push(format!("Dynamic VRAM {}", if d { "on" } else { "off" }));
    }
    if let Some(v) = &e.vram_state {
        parts.push(v.clone());
    }
    if let Some(a) = &e.allocator {
        parts.push(format!("allocator {a}"));
    }
    if let Some(p) = e.pinned_memory {
        parts.push(format!("pinned memory {}", if p { "on" } else { "off" }));
    }
    if let Some(n) = e.async_offload_streams {
        parts.push(if n == 0 {
            "async offload off".to_string()
        } else {
            format!("async offload {n} streams")
        });
    }
    if let Some(c) = &e.cache {
        parts.push(format!("cache {c}"));
    }
    parts.join(", ")
}

/// The title line.
fn title(src: &Source, failing: Option<&RunRecord>) -> String {
    let what = failing
        .map(|r| r.outcome)
        .filter(|o| *o != Outcome::Pass)
        .map(|o| o.describe().to_string());
    let version = failing
        .and_then(|r| r.effective.comfyui_version.clone())
        .map(|v| format!(" (ComfyUI {v})"))
        .unwrap_or_default();
    if let Some(res) = src.regress.as_ref().and_then(|r| r.result.as_ref()) {
        let what = what
            .or_else(|| res.verdict.regress.map(|o| o.describe().to_string()))
            .unwrap_or_else(|| "Failure".into());
        let at = |c: &Option<crate::regress::git::CommitInfo>| {
            c.as_ref()
                .map(|c| {
                    format!(
                        "{} ({})",
                        c.short(),
                        c.version.as_deref().unwrap_or("version unknown")
                    )
                })
                .unwrap_or_else(|| "?".into())
        };
        return match res.verdict.kind {
            crate::regress::search::Answer::FirstBadFound => format!(
                "Regression between {} and {}: {what}",
                at(&res.last_good),
                at(&res.first_bad)
            ),
            other => format!("{what}{version} (regression search: {})", other.as_str()),
        };
    }
    if let Some(res) = &src.result {
        let what = what.unwrap_or_else(|| res.baseline.outcome.describe().to_string());
        return match res.verdict.kind {
            VerdictKind::FixedBy => format!(
                "{what}{version}; passes with {}",
                res.verdict.fixing_flags.join(" ")
            ),
            VerdictKind::CausedBy => format!(
                "{what}{version} caused by {}",
                res.verdict.culprit_flags.join(" ")
            ),
            VerdictKind::NotReproduced => {
                format!("Intermittent failure{version} (did not reproduce)")
            }
            VerdictKind::NoFixFound => format!("{what}{version}; no memory flag fixes it"),
            VerdictKind::Untestable => format!("Workflow cannot be tested{version}"),
            VerdictKind::Incomplete => format!("{what}{version} (search unfinished)"),
        };
    }
    match what {
        Some(w) => format!("{w}{version}"),
        None => format!("Workflow passed{version}"),
    }
}

/// The `vrambisect` command that made the folder, as far as it was recorded.
fn rerun_command(src: &Source, failing: Option<&RunRecord>) -> String {
    if let Some(spec) = &src.spec {
        let mut a: Vec<String> = vec![
            "vrambisect".into(),
            "bisect".into(),
            "--comfyui".into(),
            spec.comfyui.display().to_string(),
            "--workflow".into(),
            spec.workflow.display().to_string(),
        ];
        if let Some(p) = &spec.python {
            a.extend(["--python".into(), p.display().to_string()]);
        }
        if let Some(l) = &spec.launcher {
            a.extend(["--launcher".into(), l.display().to_string()]);
        }
        if !spec.default_toggles {
            for t in &spec.toggles {
                a.push(format!("--toggle={t}"));
            }
        }
        let strategy = serde_json::to_value(spec.strategy)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        a.extend(["--strategy".into(), strategy]);
        a.extend(["--repeat".into(), spec.repeat.to_string()]);
        a.extend(["--iterations".into(), spec.limits.iterations.to_string()]);
        if spec.launcher.is_none() && !spec.base_flags.is_empty() {
            a.push("--".into());
            a.extend(spec.base_flags.iter().cloned());
        }
        return shell_words(&a);
    }
    let mut a: Vec<String> = vec![
        "vrambisect".into(),
        "run".into(),
        "--comfyui".into(),
        "COMFYUI_DIR".into(),
    ];
    if let Some(r) = failing {
        a.extend(["--workflow".into(), r.workflow.display().to_string()]);
        a.extend(["--iterations".into(), r.iterations.len().max(1).to_string()]);
        if !r.flags.is_empty() {
            a.push("--".into());
            a.extend(r.flags.iter().cloned());
        }
    }
    shell_words(&a)
}

fn fence(out: &mut String, lang: &str, lines: &[String]) {
    // A log line with three backticks would close the fence early.
    let ticks = if lines.iter().any(|l| l.contains("```")) {
        "````"
    } else {
        "```"
    };
    let _ = writeln!(out, "{ticks}{lang}");
    for l in lines {
        // Python 3.11's `^^^^`/`~~~~` lines under a traceback's code only point at columns:
        // long, and noise in an issue.
        let t = l.trim();
        if !t.is_empty() && t.chars().all(|c| c == '^' || c == '~') {
            continue;
        }
        let _ = writeln!(out, "{l}");
    }
    let _ = writeln!(out, "{ticks}");
}

/// Renders ISSUE.md, one section of ComfyUI's bug template after the other.
pub(crate) fn issue_md(inp: &IssueInput) -> String {
    let ctx = Ctx::of(inp);
    let mut o = String::new();
    header(&mut o, &ctx);
    custom_node_testing(&mut o, &ctx);
    expected_behavior(&mut o, &ctx);
    actual_behavior(&mut o, &ctx);
    steps_to_reproduce(&mut o, &ctx);
    debug_logs(&mut o, &ctx);
    other(&mut o, &ctx);
    o
}

/// What every section looks at: the input, and the failing and the passing run that the
/// issue is about.
struct Ctx<'a> {
    inp: &'a IssueInput<'a>,
    src: &'a Source,
    failing_dir: Option<&'a RunDir>,
    failing: Option<&'a RunRecord>,
    passing_dir: Option<&'a RunDir>,
    passing: Option<&'a RunRecord>,
}

impl<'a> Ctx<'a> {
    fn of(inp: &'a IssueInput<'a>) -> Ctx<'a> {
        let src = inp.source;
        let failing_dir = src.failing();
        let passing_dir = src.passing();
        Ctx {
            inp,
            src,
            failing_dir,
            failing: failing_dir.and_then(|r| r.record.as_ref()),
            passing_dir,
            passing: passing_dir.and_then(|r| r.record.as_ref()),
        }
    }
}

/// How to file it, the title, and whether the session finished.
fn header(o: &mut String, ctx: &Ctx) {
    let from = match ctx.src.kind {
        SourceKind::Run => "a run",
        SourceKind::Bisect => "a bisect session",
        SourceKind::Regress => "a regress session",
        SourceKind::Failure => "a failure as it happened",
    };
    let _ = writeln!(
        o,
        "<!--\n  Made by vrambisect {} (`vrambisect report`) from {from}.\n  To file it: open {},\n  copy each section below into the field of the same name (in Debug Logs, only the lines\n  inside the code blocks), and attach the .zip this file came in.\n-->\n",
        env!("CARGO_PKG_VERSION"),
        super::ISSUE_FORM
    );
    let _ = writeln!(o, "# {}\n", title(ctx.src, ctx.failing));
    if let Some(why) = ctx.src.incomplete() {
        let _ = writeln!(o, "> **Incomplete session:** {why}.\n");
    }
}

/// The template's checkbox: ticked only when a run without custom nodes failed the same way.
fn custom_node_testing(o: &mut String, ctx: &Ctx) {
    let _ = writeln!(o, "### Custom Node Testing\n");
    // A check run answers the question; without one, the box stays for the user to tick.
    let check = ctx
        .src
        .result
        .as_ref()
        .and_then(|r| r.custom_nodes_check.as_ref());
    let ticked = check.is_some_and(|c| ctx.failing.is_some_and(|f| c.outcome == f.outcome));
    let _ = writeln!(
        o,
        "- [{}] I have tried disabling custom nodes and the issue persists\n",
        if ticked { "x" } else { " " }
    );
    if let Some(c) = check {
        let run = c
            .run_dir
            .as_ref()
            .and_then(|d| d.file_name())
            .map(|n| format!(" (run {})", n.to_string_lossy()))
            .unwrap_or_default();
        let _ = writeln!(o, "{}{run}\n", c.statement);
        return;
    }
    let nodes = ctx.inp.env.custom_nodes.value().map(Vec::len);
    let disabled = ctx
        .failing
        .is_some_and(|r| r.argv.iter().any(|a| a == "--disable-all-custom-nodes"));
    let _ = match (nodes, disabled) {
        (_, true) => writeln!(o, "The runs below used `--disable-all-custom-nodes`.\n"),
        (Some(0), _) => writeln!(o, "No custom nodes are installed.\n"),
        (Some(n), _) => writeln!(
            o,
            "{n} custom node {} installed (listed under Other); the runs loaded {}. Rerun with `--disable-all-custom-nodes` before ticking the box.\n",
            if n == 1 { "entry is" } else { "entries are" },
            if n == 1 { "it" } else { "them" }
        ),
        (None, _) => writeln!(o, "The custom nodes installed are not known.\n"),
    };
}

/// The workflow runs with the user's flags, as it does with the fix (or without the culprit).
fn expected_behavior(o: &mut String, ctx: &Ctx) {
    let _ = writeln!(o, "### Expected Behavior\n");
    let wf = ctx
        .inp
        .workflow
        .map(workflow_summary)
        .unwrap_or_else(|| "not included".into());
    let line = ctx
        .failing
        .map(user_line)
        .unwrap_or_else(|| "python main.py".into());
    let _ = write!(
        o,
        "The workflow (`workflow.json`, {wf}) runs to completion when ComfyUI is started with {}",
        code(&line)
    );
    match (&ctx.src.result, ctx.passing) {
        (Some(res), Some(p)) if res.verdict.kind == VerdictKind::FixedBy => {
            let _ = write!(o, ", as it does with {}", code(&user_line(p)));
        }
        (Some(res), Some(p)) if res.verdict.kind == VerdictKind::CausedBy => {
            let _ = write!(
                o,
                ", as it does without {} ({})",
                res.verdict.culprit_flags.join(" "),
                code(&user_line(p))
            );
        }
        _ => {}
    }
    let _ = writeln!(o, ".\n");
}

/// The verdict, the commits a regress tested, the failing run with its evidence and memory,
/// and RAM that was not given back.
fn actual_behavior(o: &mut String, ctx: &Ctx) {
    let _ = writeln!(o, "### Actual Behavior\n");
    if let Some(res) = &ctx.src.result {
        let _ = writeln!(
            o,
            "{}\n",
            res.verdict.statement.replace("your flags", "these flags")
        );
    }
    if let Some(res) = ctx.src.regress.as_ref().and_then(|r| r.result.as_ref()) {
        regress_commits(o, res);
    }
    if let (Some(r), Some(dir)) = (ctx.failing, ctx.failing_dir) {
        failing_run(o, ctx, r, dir);
    }
    ram_not_returned(o, ctx.src);
}

/// What a regress session found, and every commit it tested or skipped.
fn regress_commits(o: &mut String, res: &crate::regress::RegressResult) {
    let _ = writeln!(o, "{}\n", res.verdict.statement);
    if let Some(url) = &res.url {
        let _ = writeln!(o, "The commit: {url}\n");
    }
    let _ = writeln!(
        o,
        "Commits tested on first-parent history (vrambisect regress, {}):\n",
        crate::text::plural(res.runs_total as usize, "run")
    );
    let _ = writeln!(
        o,
        "| commit | version | packages | outcome | |\n|---|---|---|---|---|"
    );
    for t in &res.tested {
        let packages: Vec<String> = t
            .packages
            .iter()
            .map(|(n, v)| {
                let installed = t
                    .environment
                    .as_ref()
                    .is_some_and(|e| e.packages.iter().any(|(p, _)| p == n));
                format!(
                    "{n} {v}{}",
                    if installed { " (installed for it)" } else { "" }
                )
            })
            .collect();
        let _ = writeln!(
            o,
            "| `{}` | {} | {} | {} | {} |",
            crate::text::abbrev(&t.commit, 7),
            t.version.as_deref().unwrap_or("?"),
            cell(&packages.join(", ")),
            t.outcome
                .map(|x| x.to_string())
                .unwrap_or_else(|| "-".into()),
            format!("{:?}", t.mark).to_lowercase()
                + if t.kind == crate::bisect::search::RunKind::Quick {
                    " (shortened)"
                } else {
                    ""
                }
        );
    }
    for sk in &res.skipped {
        let _ = writeln!(
            o,
            "| `{}` | | | skipped | {} |",
            crate::text::abbrev(&sk.commit, 7),
            cell(&sk.reason)
        );
    }
    let _ = writeln!(o);
    if let Some(line) = &res.reproduce {
        let _ = writeln!(o, "Reproduce with: {}\n", code(line));
    }
}

/// The failing run: its outcome, what was in force, the evidence lines, memory, timeline.
fn failing_run(o: &mut String, ctx: &Ctx, r: &RunRecord, dir: &RunDir) {
    let _ = writeln!(
        o,
        "Run {} ({}): **{}**{}.",
        dir.label,
        flags_phrase(&r.flags),
        r.outcome,
        failed_at(r, ctx.inp.workflow)
            .map(|s| format!(" — {s}"))
            .unwrap_or_default()
    );
    let eff = effective_line(r);
    if !eff.is_empty() {
        let _ = writeln!(o, "In force according to its startup log: {eff}.");
    }
    if let Some(x) = &r.explanation {
        let _ = writeln!(o, "{x}");
    }
    let _ = writeln!(o);
    if !r.evidence.is_empty() {
        let lines: Vec<String> = r
            .evidence
            .iter()
            .take(6)
            .map(|e| {
                if e.chars().count() > MAX_LINE {
                    e.chars().take(MAX_LINE).collect::<String>() + " …"
                } else {
                    e.clone()
                }
            })
            .collect();
        fence(o, "text", &lines);
        let _ = writeln!(o);
    }
    let p = &r.peaks;
    let parts: Vec<String> = [
        (p.vram_used_bytes, "peak VRAM used {} (NVML, whole GPU)"),
        (p.vram_comfyui_bytes, "ComfyUI's processes held up to {}"),
        (p.vram_other_processes_bytes, "other processes up to {}"),
        (p.ram_comfyui_bytes, "ComfyUI's resident RAM peaked at {}"),
        (p.ram_available_min_bytes, "available RAM fell to {}"),
    ]
    .into_iter()
    .filter_map(|(v, words)| v.map(|v| words.replace("{}", &gib(Some(v)))))
    .collect();
    if !parts.is_empty() {
        let _ = writeln!(o, "Memory during that run: {}.", parts.join("; "));
    }
    if !r.sampling.is_empty() {
        let _ = writeln!(o, "Not sampled: {}.", r.sampling.join("; "));
    }
    if ctx.inp.timelines.contains(&dir.label) {
        let _ = writeln!(o, "Timeline: `runs/{}/timeline.png`.", dir.label);
    }
    let _ = writeln!(o);
}

/// RAM that ComfyUI kept after its prompts, in any run: a finding whatever the outcome.
fn ram_not_returned(o: &mut String, src: &Source) {
    let grew: Vec<String> = src
        .runs
        .iter()
        .filter_map(|d| {
            let r = d.record.as_ref()?;
            let g = r.ram_growth.as_ref()?;
            Some(format!(
                "- run {} ({}): {}",
                d.label,
                flags_phrase(&r.flags),
                g.statement
            ))
        })
        .collect();
    if grew.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "**RAM not returned.** ComfyUI's resident memory after a prompt, minus before it:\n"
    );
    for g in &grew {
        let _ = writeln!(o, "{g}");
    }
    let _ = writeln!(o);
}

/// The steps in words, then the exact command lines that ran and the vrambisect command.
fn steps_to_reproduce(o: &mut String, ctx: &Ctx) {
    let _ = writeln!(o, "### Steps to Reproduce\n");
    let _ = writeln!(
        o,
        "1. The workflow is the attached `workflow.json` (API format, exactly as it was queued)."
    );
    if let Some(r) = ctx.failing {
        let _ = writeln!(o, "2. Start ComfyUI with {}.", code(&user_line(r)));
        let n = r.iterations.len().max(1);
        let _ = match r.iterations.iter().find(|i| i.outcome != Outcome::Pass) {
            Some(it) if n > 1 => writeln!(
                o,
                "3. Queue the workflow {n} times in the same ComfyUI (each with a new seed); prompt {} fails: {}.",
                it.iteration,
                it.outcome.describe()
            ),
            Some(it) => writeln!(o, "3. Queue the workflow: {}.", it.outcome.describe()),
            None => writeln!(o, "3. Queue the workflow: it passes."),
        };
        if let (Some(p), Some(res)) = (ctx.passing, &ctx.src.result)
            && matches!(
                res.verdict.kind,
                VerdictKind::FixedBy | VerdictKind::CausedBy
            )
        {
            let _ = writeln!(
                o,
                "4. Start ComfyUI with {} instead: it passes.",
                code(&user_line(p))
            );
        }
    }
    let _ = writeln!(
        o,
        "\nExact command lines (vrambisect started ComfyUI itself, on a free loopback port, without a browser; the first run of a bisect logs at DEBUG level):\n"
    );
    let mut lines = Vec::new();
    for d in [ctx.failing_dir, ctx.passing_dir].into_iter().flatten() {
        if let Some(r) = &d.record {
            let what = if r.outcome == Outcome::Pass {
                "passes".to_string()
            } else {
                format!("fails: {}", r.outcome)
            };
            lines.push(format!("# run {} ({what})", d.label));
            lines.push(exact_line(r));
        }
    }
    for (k, v) in ctx.src.spec.iter().flat_map(|s| s.env.iter()) {
        // Only allowlisted values: a launcher also sets tokens and private settings.
        let shown = if super::redact::env_allowed(k) || !ctx.inp.redact {
            v.as_str()
        } else {
            super::redact::REDACTED
        };
        lines.push(format!("# environment set by the launcher: {k}={shown}"));
    }
    fence(o, "sh", &lines);
    let _ = writeln!(o, "\nThe vrambisect command:\n");
    fence(o, "sh", &[rerun_command(ctx.src, ctx.failing)]);
    let _ = writeln!(o);
}

/// The failing run's startup block and the window around its failure.
fn debug_logs(o: &mut String, ctx: &Ctx) {
    let _ = writeln!(o, "### Debug Logs\n");
    match ctx
        .failing_dir
        .and_then(|d| ctx.inp.logs.get(&d.label).map(|l| (d, l)))
    {
        Some((d, log)) => {
            let lines = log_lines(log);
            let _ = writeln!(o, "Startup (run {}):\n", d.label);
            fence(o, "powershell", &startup_block(&lines));
            let evidence = d
                .record
                .as_ref()
                .map(|r| r.evidence.clone())
                .unwrap_or_default();
            if d.outcome().is_some_and(|o| o != Outcome::Pass) {
                let _ = writeln!(o, "\nThe failure (run {}):\n", d.label);
                fence(o, "powershell", &failure_window(&lines, &evidence));
            }
            let _ = writeln!(
                o,
                "\nThe full log of every run is in the bundle: `runs/NNN/comfyui.log`."
            );
        }
        None => {
            let _ = writeln!(o, "No ComfyUI log was recorded.");
        }
    }
    let _ = writeln!(o);
}

/// The verdict and run matrix, every run, and the environment.
fn other(o: &mut String, ctx: &Ctx) {
    let _ = writeln!(o, "### Other\n");
    if let Some(res) = &ctx.src.result {
        verdict_and_matrix(o, res);
    }
    runs_table(o, ctx);
    if ctx.inp.has_matrix {
        let _ = writeln!(o, "The matrix as a picture: `matrix.png`.\n");
    }
    environment_table(o, ctx.inp.env);
}

/// The environment as a table, and what redaction replaced (the end of every ISSUE.md).
pub(crate) fn environment_table(o: &mut String, env: &crate::machine::Environment) {
    let _ = writeln!(o, "**Environment** (full detail in `environment.json`)\n");
    let _ = writeln!(o, "| item | value | source |");
    let _ = writeln!(o, "|---|---|---|");
    for row in environment::rows(env) {
        let _ = writeln!(
            o,
            "| {} | {} | {} |",
            cell(&row.item),
            cell(&row.value),
            cell(&row.source)
        );
    }
    let _ = writeln!(
        o,
        "\nHome folders, user and host names, e-mail and IP addresses, tokens and secret values were replaced by vrambisect (`~`, `[user]`, `[host]`, `[email]`, `[ip]`, `[token]`, `[redacted]`); the bundle's README.md says how many of each."
    );
}

/// A bisect's verdict and every configuration it ran.
fn verdict_and_matrix(o: &mut String, res: &crate::bisect::result::BisectResult) {
    let kind = res.verdict.kind.as_str();
    let flags = res.verdict.named_flags();
    let _ = writeln!(
        o,
        "**Verdict** (vrambisect bisect, {}): `{kind}` {}",
        crate::text::plural(res.runs_total as usize, "run"),
        flags.iter().map(|f| code(f)).collect::<Vec<_>>().join(" ")
    );
    if res.verdict.flaky {
        let _ = writeln!(
            o,
            "Outcomes were flaky: some configurations both passed and failed."
        );
    }
    if let (Some(p), Some(_)) = (res.verdict.confidence, res.verdict.failure_rate) {
        {
            let rate = res
                .verdict
                .failure_rate
                .map(|r| {
                    format!(
                        "; configurations without it failed at a rate of {:.2}-{:.2} (90% interval)",
                        r.low, r.high
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "Confidence in the verdict given the runs that happened: {}{rate}.",
                crate::bayes::percent(p)
            );
        }
    }
    let _ = writeln!(o);
    fixes_that_passed(o, &res.verdict);
    let _ = writeln!(o, "**Run matrix**\n");
    let _ = writeln!(
        o,
        "| configuration | flags | outcome | passed/runs | peak VRAM | peak RAM (ComfyUI) | mean time | runs |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
    for c in &res.configs {
        // A shortened run is marked: its workflow is `workflow.quick.json` in its folder.
        let shortened = |name: &str| {
            c.each_run
                .iter()
                .any(|r| r.kind == crate::bisect::search::RunKind::Quick && name.parse() == Ok(r.n))
        };
        let runs: Vec<String> = c
            .run_dirs
            .iter()
            .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .map(|n| {
                if shortened(&n) {
                    format!("{n} (shortened)")
                } else {
                    n
                }
            })
            .collect();
        let ram = match c.ram_growth_per_prompt_bytes {
            Some(g) => format!(
                "{} (+{}/prompt kept)",
                gib(c.peak_ram_bytes),
                crate::text::bytes(g)
            ),
            None => gib(c.peak_ram_bytes),
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {}/{} | {} | {} | {} | {} |",
            cell(&c.changes.join(", ")),
            cell(&flags_text(&c.flags)),
            c.outcome,
            c.passes,
            c.runs,
            gib(c.peak_vram_bytes),
            ram,
            c.time_text(),
            runs.join(", ")
        );
    }
    for s in &res.skipped_toggles {
        let _ = writeln!(o, "\nSkipped {}: {}", code(&s.toggle), s.reason);
    }
    let _ = writeln!(o);
}

/// The fixes that passed, the recommendation first: which keep Dynamic VRAM on and what each
/// cost (what ComfyUI's maintainers ask for when Dynamic VRAM is suspected).
fn fixes_that_passed(o: &mut String, v: &crate::bisect::result::Verdict) {
    let Some(fix) = &v.fix else { return };
    let _ = writeln!(o, "**Settings that pass**\n");
    let _ = writeln!(
        o,
        "| flags | Dynamic VRAM | seconds per step | to the first step | peak VRAM | confirmed in full | against the first row |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|");
    for f in std::iter::once(fix).chain(&v.alternatives) {
        let dynamic = match f.keeps_dynamic_vram {
            Some(true) => "on",
            Some(false) => "off",
            None => "?",
        };
        let kind = if f.cost.kind == Some(crate::bisect::search::RunKind::Quick) {
            " (shortened)"
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "| {} | {dynamic} | {}{kind} | {} | {} | {} | {} |",
            cell(&f.fixing_flags.join(" ")),
            f.cost
                .seconds_per_step
                .map(|s| format!("{s:.2} s"))
                .unwrap_or_else(|| "-".into()),
            f.cost
                .load_s
                .map(|s| format!("{s:.1} s"))
                .unwrap_or_else(|| "-".into()),
            gib(f.cost.peak_vram_bytes),
            if f.confirmed_full { "yes" } else { "no" },
            cell(f.compared.as_deref().unwrap_or("(recommended)")),
        );
    }
    for n in &v.not_helped {
        let _ = writeln!(o, "\n{}.", n);
    }
    let _ = writeln!(o);
}

/// Every run of the folder, cut-short ones included.
fn runs_table(o: &mut String, ctx: &Ctx) {
    let _ = writeln!(o, "**Runs**\n");
    let _ = writeln!(
        o,
        "| run | flags | outcome | prompts | time | peak VRAM | timeline |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|");
    for d in &ctx.src.runs {
        let timeline = if ctx.inp.timelines.contains(&d.label) {
            format!("`runs/{}/timeline.png`", d.label)
        } else {
            "-".into()
        };
        let _ = match &d.record {
            Some(r) => writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} |",
                d.label,
                cell(&flags_text(&r.flags)),
                r.outcome,
                r.iterations.len(),
                secs(r.duration_ms),
                gib(r.peaks.vram_used_bytes),
                timeline
            ),
            None => writeln!(
                o,
                "| {} | - | (no record: cut short) | - | - | - | - |",
                d.label
            ),
        };
    }
    let _ = writeln!(o);
}

/// One file of the bundle, for README.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileNote {
    pub name: String,
    pub what: String,
}

/// What a file of the bundle is, by name.
pub(crate) fn describe_file(name: &str) -> String {
    let base = name.rsplit('/').next().unwrap_or(name);
    match base {
        "ISSUE.md" => "the issue text, in the sections of ComfyUI's bug template".into(),
        "README.md" => "this list".into(),
        "environment.json" => {
            "OS, CPU, RAM, GPUs, driver, versions, custom nodes, launcher; each item with its source or why it is missing".into()
        }
        "workflow.json" => "the workflow in API format, as queued".into(),
        "workflow-source.json" => {
            "the workflow as it was given (UI format), from which the queued prompt was made as ComfyUI's frontend makes it".into()
        }
        "result.json" => "the bisect's result: verdict, every configuration with its outcome".into(),
        "session.json" => "the bisect's settings".into(),
        "matrix.png" => "the run matrix as a picture".into(),
        folder::RECORD => "the run's record: outcome, evidence lines, argv, what the startup log says was in force, peaks".into(),
        folder::SAMPLES_CSV => "memory samples (NVML, ComfyUI's CUDA view, RAM, the process tree) with event marks".into(),
        folder::SAMPLES_SUMMARY => "minimum and peak of every sampled series, the GPUs seen".into(),
        folder::SYSTEM_STATS => "ComfyUI's /system_stats at the end of the run".into(),
        "timeline.png" => "memory timeline: VRAM by source, RAM, node boundaries, the failure".into(),
        b if b.starts_with("history-") => "ComfyUI's /history entry of one prompt".into(),
        b if b.starts_with("rejected-") => "ComfyUI's answer when it refused the prompt".into(),
        b if b.starts_with("comfyui") && b.ends_with(".log") => {
            "ComfyUI's full console output (stdout and stderr), colour codes removed".into()
        }
        _ => String::new(),
    }
}

/// Renders the bundle's README.md.
pub(crate) fn readme_md(
    files: &[FileNote],
    redaction: &[(String, usize)],
    redacted: bool,
) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# vrambisect report bundle\n\nMade by vrambisect {} for a ComfyUI bug report. Start with ISSUE.md.\n",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(o, "| file | what it holds |\n|---|---|");
    for f in files {
        let _ = writeln!(o, "| `{}` | {} |", f.name, cell(&f.what));
    }
    let _ = writeln!(o);
    if !redacted {
        let _ = writeln!(
            o,
            "**Not redacted** (`--no-redact`): paths, names, tokens and keys are as recorded."
        );
    } else if redaction.is_empty() {
        let _ = writeln!(o, "Redaction found nothing to remove.");
    } else {
        let _ = writeln!(
            o,
            "Redacted before packing (placeholders: `~` home folder, `[user]`, `[host]`, `[email]`, `[ip]`, `[token]`, `[credentials]`, `[redacted]`):\n"
        );
        for (what, n) in redaction {
            let _ = writeln!(o, "- {what}: {n}");
        }
    }
    o
}

/// The title of a run's timeline: `run 001 · oom (CUDA out of memory) · flags: --highvram`.
pub(crate) fn run_label(d: &RunDir) -> String {
    let Some(r) = &d.record else {
        return format!("run {} (no record)", d.label);
    };
    let flags = if r.flags.is_empty() {
        "none".to_string()
    } else {
        shell_words(&r.flags)
    };
    let what = if r.outcome == Outcome::Pass {
        "pass".to_string()
    } else {
        format!("{} ({})", r.outcome, r.outcome.describe())
    };
    format!("run {} · {what} · flags: {flags}", d.label)
}

#[cfg(test)]
#[path = "issue_sections.rs"]
mod sections;

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &[&str]) -> Vec<String> {
        s.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn log_lines_keep_levels_and_drop_colours() {
        let out = log_lines(
            "\x1b[32m[INFO]\x1b[0m ComfyUI version: 0.38.1\nplain\r\n  5%|#  |\r 50%|#####|\n",
        );
        assert_eq!(
            out,
            ["[INFO] ComfyUI version: 0.38.1", "plain", " 50%|#####|"]
        );
    }

    #[test]
    fn excerpts() {
        let log: Vec<String> = (0..200).map(|i| format!("line {i}")).collect();
        let capped = cap_lines(log.clone(), 10);
        assert_eq!(capped.len(), 10);
        assert_eq!(capped[6], "… [191 lines trimmed] …");
        assert_eq!(capped[9], "line 199");
        let mut log = lines(&[
            "start",
            "To see the GUI go to: http://127.0.0.1:1",
            "got prompt",
        ]);
        log.extend((0..50).map(|i| format!("noise {i}")));
        log.push("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.14 GiB".into());
        log.push("after".into());
        assert_eq!(startup_block(&log).len(), 2);
        let w = failure_window(
            &log,
            &["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.14 GiB. GPU 0 in node 3 (KSampler)".into()],
        );
        assert_eq!(w.first().unwrap(), "noise 25");
        assert_eq!(w.last().unwrap(), "after");
        // A second error far below the first gets its own lines.
        let mut far = log.clone();
        far.extend((0..200).map(|i| format!("later {i}")));
        far.push("RuntimeError: Fault failed: 2".into());
        let w = failure_window(
            &far,
            &[
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.14 GiB".into(),
                "RuntimeError: Fault failed: 2".into(),
            ],
        );
        assert!(w.contains(&"… [92 lines] …".to_string()), "{w:?}");
        assert_eq!(w.last().unwrap(), "RuntimeError: Fault failed: 2");
        // No evidence line in the log (a hang): the end of the log, never the startup.
        let w = failure_window(&log, &["Requested to load nothing like this".into()]);
        assert_eq!(w.len(), 40);
        assert_eq!(w.last().unwrap(), "after");
    }

    #[test]
    fn workflow_summaries() {
        let wf = serde_json::json!({
            "10": {"class_type": "SaveImage"}, "3": {"class_type": "KSampler"},
            "6": {"class_type": "CLIPTextEncode"}, "7": {"class_type": "CLIPTextEncode"}
        });
        assert_eq!(
            workflow_summary(&wf),
            "4 nodes: KSampler, CLIPTextEncode ×2, SaveImage"
        );
    }
}
