//! A bundle of a failure as it happened, with nothing rerun (`report --log FILE`): the log,
//! the workflow and the failed prompt's history entry the user has, the environment, logscan's
//! reading of the log and an ISSUE.md in the shape of ComfyUI's bug template. Redacted and
//! packed as every bundle is (`super::finish`). The ComfyUI extension writes it from its panel
//! when no diagnosis has run.

use super::issue::{cap_lines, failure_window, log_lines, startup_block, workflow_summary};
use super::{Content, Entry, Finish, Request, SourceKind, trim_middle};
use crate::error::{Error, Result};
use crate::logscan::{self, report::LogReport};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What the user has of the failure.
#[derive(Debug, Clone, Default)]
pub struct FailureFiles {
    /// ComfyUI's log (console output or `user/comfyui.log`).
    pub log: PathBuf,
    /// The workflow that failed (API or UI format), when there is one.
    pub workflow: Option<PathBuf>,
    /// The failed prompt's entry of ComfyUI's `/history` (its error, its prompt).
    pub history: Option<PathBuf>,
}

/// One of the user's files, read as a run's files are (`super::file_text`: bounded, a log's
/// middle cut and marked as in every bundle); a link is followed to the file it names.
fn user_file(path: &Path, name: &str) -> Result<super::FileText> {
    let real = std::fs::canonicalize(path).map_err(|e| crate::error::io_error("read", path, &e))?;
    let root = real.parent().unwrap_or(Path::new("/"));
    super::file_text(root, &real, name, true)
        .map_err(|why| Error::usage(format!("{} {why}", path.display())))
}

/// `--log -`: the log piped in, read as a log file is (its head and tail where it is long).
fn read_stdin() -> Result<String> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        return Err(Error::usage(
            "--log - reads ComfyUI's log from standard input, which is a terminal here",
        )
        .hint("pipe the log in (… | vrambisect report --log -), or give --log the log file"));
    }
    super::collect::stdin_log_text()
        .map_err(|e| crate::error::io_error("read", Path::new("standard input"), &e))
}

fn read_log(path: &Path) -> Result<String> {
    Ok(match user_file(path, "comfyui.log")? {
        super::FileText::Text(t) => t,
        super::FileText::Json(v) => v.to_string(),
    })
}

fn read_json(path: &Path, what: &str) -> Result<Value> {
    match user_file(path, "given.json")? {
        super::FileText::Json(v) => Ok(v),
        super::FileText::Text(_) => Err(Error::usage(format!("{} is not JSON", path.display()))
            .hint(format!("give {what} as the JSON file ComfyUI wrote"))),
    }
}

/// The failed prompt's error from its history entry (ComfyUI's `execution_error` message),
/// as given: either `{prompt_id: entry}` from `/history/ID` or the entry itself.
fn execution_error(history: &Value) -> Option<&Value> {
    let entry = match history.get("status") {
        Some(_) => history,
        None => history.as_object()?.values().next()?,
    };
    entry
        .get("status")?
        .get("messages")?
        .as_array()?
        .iter()
        .find_map(|m| match m.as_array()?.as_slice() {
            [kind, body] if kind == "execution_error" => Some(body),
            _ => None,
        })
}

/// Builds the bundle.
pub(crate) fn build(req: &Request, files: &FailureFiles) -> Result<super::Built> {
    // The log, how to name it, the folder it came from and the zip's default name.
    let (log, label, folder, stem) = if files.log == Path::new("-") {
        let here = Path::new(".").to_path_buf();
        (
            read_stdin()?,
            "standard input".to_string(),
            here,
            "stdin".to_string(),
        )
    } else {
        let stem = files
            .log
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned());
        (
            read_log(&files.log)?,
            files.log.display().to_string(),
            files.log.parent().unwrap_or(Path::new(".")).to_path_buf(),
            stem.unwrap_or_else(|| "log".into()),
        )
    };
    let reading = logscan::scan_bytes(&label, log.as_bytes(), logscan::Mode::Prefilter)?;
    let workflow = files
        .workflow
        .as_deref()
        .map(|p| read_json(p, "--workflow"))
        .transpose()?;
    let history = files
        .history
        .as_deref()
        .map(|p| read_json(p, "--history"))
        .transpose()?;
    let source_dir = crate::paths::canonical(&folder);
    let output = req
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("vrambisect-report-{stem}.zip")));
    super::check_output(&output)?;
    let (comfyui, comfyui_unknown) = match (&req.comfyui, super::install_from_log(&log)) {
        (Some(d), _) => (Some((d.clone(), "--comfyui".to_string())), None),
        (None, Some(d)) => (Some((d, "the log (custom node paths)".to_string())), None),
        (None, None) => (
            None,
            Some("the log does not say where ComfyUI is (pass --comfyui DIR)".to_string()),
        ),
    };
    let env = super::machine::capture(&super::Inputs {
        comfyui,
        comfyui_unknown,
        python: req.python.clone(),
        run: None,
        launcher: None,
        launcher_env: Vec::new(),
        nvml_lib: req.nvml_lib.clone(),
        ask_python: true,
    });
    let mut entries = vec![
        Entry {
            name: "ISSUE.md".into(),
            content: Content::Text(issue_md(
                &reading,
                &log,
                workflow.as_ref(),
                history.as_ref(),
                &env,
            )),
        },
        Entry {
            name: "comfyui.log".into(),
            content: Content::Text(
                trim_middle(&log, super::STEPS[0].log_head, super::STEPS[0].log_tail).0,
            ),
        },
        Entry {
            name: "logscan.json".into(),
            content: Content::Json(serde_json::to_value(&reading).expect("the reading serialises")),
        },
        Entry {
            name: "environment.json".into(),
            content: Content::Json(serde_json::to_value(&env).expect("environment serialises")),
        },
    ];
    if let Some(w) = workflow {
        entries.push(Entry {
            name: "workflow.json".into(),
            content: Content::Json(w),
        });
    }
    if let Some(h) = history {
        entries.push(Entry {
            name: "history.json".into(),
            content: Content::Json(h),
        });
    }
    let redactor = super::redactor(req, &entries);
    super::finish(
        req,
        &output,
        Finish {
            entries,
            thinned: BTreeMap::new(),
            warnings: Vec::new(),
            redactor,
            source_kind: SourceKind::Failure,
            source_dir,
            runs: 0,
        },
    )
}

/// ISSUE.md of a failure nothing reran: the template's sections, from the reading and the
/// prompt's own error.
fn issue_md(
    reading: &LogReport,
    log: &str,
    workflow: Option<&Value>,
    history: Option<&Value>,
    env: &super::Environment,
) -> String {
    let mut o = String::new();
    let error = history.and_then(execution_error);
    let field = |k: &str| error.and_then(|e| e.get(k)).and_then(Value::as_str);
    let _ = writeln!(
        o,
        "<!--\n  Made by vrambisect {} (`vrambisect report --log`) from a failure as it happened: nothing was rerun.\n  To file it: open {},\n  copy each section below into the field of the same name (in Debug Logs, only the lines\n  inside the code blocks), and attach the .zip this file came in.\n-->\n",
        env!("CARGO_PKG_VERSION"),
        super::ISSUE_FORM
    );
    let what = match (field("exception_type"), field("node_type")) {
        (Some(t), Some(n)) => format!("{t} in {n}"),
        (Some(t), None) => t.to_string(),
        _ => match (reading.known_issues.first(), reading.outcome) {
            (Some(k), _) => k.title.to_string(),
            (None, Some(o)) => format!("A prompt ended with {}", o.as_str()),
            (None, None) => "A failed prompt".into(),
        },
    };
    let facts = &reading.startup.facts;
    let mut context = Vec::new();
    if let Some(v) = &facts.comfyui_version {
        context.push(format!("ComfyUI {v}"));
    }
    if let Some(d) = facts.dynamic_vram {
        context.push(format!("Dynamic VRAM {}", if d { "on" } else { "off" }));
    }
    let context = if context.is_empty() {
        String::new()
    } else {
        format!(" ({})", context.join(", "))
    };
    let _ = writeln!(o, "# {what}{context}\n");
    let _ = writeln!(o, "### Custom Node Testing\n");
    let _ = writeln!(
        o,
        "- [ ] I have tried disabling custom nodes and the issue persists\n\n(Not tested: this report reran nothing. `vrambisect bisect` tests it.)\n"
    );
    let _ = writeln!(o, "### Expected Behavior\n");
    let _ = writeln!(o, "The workflow runs to the end.\n");
    let _ = writeln!(o, "### Actual Behavior\n");
    let _ = writeln!(o, "{}\n", reading.summary);
    if let Some(msg) = field("exception_message") {
        let first = msg.trim().lines().next().unwrap_or_default();
        let _ = writeln!(
            o,
            "The prompt's error{}: `{}`\n",
            field("node_type")
                .map(|n| format!(" (node {n})"))
                .unwrap_or_default(),
            first.replace('`', "'")
        );
    }
    for k in &reading.known_issues {
        let links: Vec<String> = k.issues.iter().map(|n| format!("#{n}")).collect();
        let _ = writeln!(
            o,
            "- {}: {}{}",
            k.title,
            k.meaning,
            if links.is_empty() {
                String::new()
            } else {
                format!(" (like {})", links.join(", "))
            }
        );
    }
    if !reading.known_issues.is_empty() {
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "### Steps to Reproduce\n");
    match &reading.startup.launch_args {
        Some(args) => {
            let _ = writeln!(
                o,
                "1. Start ComfyUI with: `python main.py {}`",
                args.join(" ")
            );
        }
        None => {
            let _ = writeln!(o, "1. Start ComfyUI (its launch flags are not in the log).");
        }
    }
    match workflow {
        Some(w) => {
            let _ = writeln!(
                o,
                "2. Queue `workflow.json` from the bundle ({}).\n",
                workflow_summary(w)
            );
        }
        None => {
            let _ = writeln!(o, "2. Queue the workflow (not in this bundle).\n");
        }
    }
    let _ = writeln!(o, "### Debug Logs\n");
    let lines = log_lines(log);
    // Only a log that shows the server's start has a startup block.
    let startup = match reading.startup.line {
        Some(_) => startup_block(&lines),
        None => Vec::new(),
    };
    if !startup.is_empty() {
        let _ = writeln!(o, "Startup:\n");
        fence(&mut o, &startup);
    }
    let evidence = reading
        .prompts
        .last()
        .map(|p| p.evidence.clone())
        .unwrap_or_default();
    let window = failure_window(&lines, &evidence);
    if !window.is_empty() {
        let _ = writeln!(o, "\nThe failure:\n");
        fence(&mut o, &window);
    }
    let _ = writeln!(
        o,
        "\nThe whole log is in the bundle: `comfyui.log`; logscan's reading: `logscan.json`.\n"
    );
    let _ = writeln!(o, "### Other\n");
    super::issue::environment_table(&mut o, env);
    o
}

fn fence(o: &mut String, lines: &[String]) {
    let lines = cap_lines(lines.to_vec(), 200);
    let _ = writeln!(o, "```powershell");
    for l in lines {
        let _ = writeln!(o, "{}", l.replace("```", "'''"));
    }
    let _ = writeln!(o, "```");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
    }

    #[test]
    fn the_prompts_error_is_read_from_either_shape_of_history() {
        let entry = serde_json::json!({"status": {"messages": [
            ["execution_start", {"prompt_id": "a"}],
            ["execution_error", {"node_type": "KSampler", "exception_type": "torch.OutOfMemoryError"}]
        ]}});
        assert_eq!(execution_error(&entry).unwrap()["node_type"], "KSampler");
        let keyed = serde_json::json!({"a": entry});
        assert_eq!(execution_error(&keyed).unwrap()["node_type"], "KSampler");
        assert!(execution_error(&serde_json::json!({"a": {"status": {}}})).is_none());
        assert!(execution_error(&serde_json::json!([])).is_none());
    }

    #[test]
    fn a_bundle_of_a_log_alone_reruns_nothing_and_is_redacted() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("comfyui.log");
        let text = std::fs::read_to_string(fixture(
            "fixtures/logs/real/05-vbar-oom-traceback-tail-portable.log",
        ))
        .unwrap();
        std::fs::write(&log, format!("{text}\nC:\\Users\\ana\\ComfyUI\\main.py\n")).unwrap();
        let history = tmp.path().join("history.json");
        std::fs::write(
            &history,
            r#"{"status": {"messages": [["execution_error", {"node_type": "KSampler", "exception_type": "MemoryError", "exception_message": "VBAR OOM", "current_inputs": {"api_key": "sk-secret"}}]]}}"#,
        )
        .unwrap();
        let out = tmp.path().join("bundle.zip");
        let req = Request {
            dir: None,
            failure: None,
            output: Some(out.clone()),
            redact: true,
            comfyui: None,
            python: Some(PathBuf::from("python3")),
            nvml_lib: Some(tmp.path().join("no-nvml.so")),
        };
        let files = FailureFiles {
            log,
            workflow: None,
            history: Some(history),
        };
        let built = build(&req, &files).unwrap();
        assert_eq!(built.source_kind, SourceKind::Failure);
        assert_eq!(built.runs, 0);
        let names: Vec<&str> = built.files.iter().map(|f| f.name.as_str()).collect();
        for want in [
            "ISSUE.md",
            "comfyui.log",
            "logscan.json",
            "environment.json",
            "history.json",
        ] {
            assert!(names.contains(&want), "{want} in {names:?}");
        }
        let zip = std::fs::File::open(&out).unwrap();
        let mut zip = zip::ZipArchive::new(zip).unwrap();
        let mut issue = String::new();
        std::io::Read::read_to_string(&mut zip.by_name("ISSUE.md").unwrap(), &mut issue).unwrap();
        assert!(issue.starts_with("<!--"), "{issue}");
        assert!(issue.contains("# MemoryError in KSampler"), "{issue}");
        assert!(issue.contains("nothing was rerun"), "{issue}");
        assert!(issue.contains("VBAR allocation failed"), "{issue}");
        assert!(
            !issue.contains("Startup:"),
            "the log shows no start: {issue}"
        );
        let mut hist = String::new();
        std::io::Read::read_to_string(&mut zip.by_name("history.json").unwrap(), &mut hist)
            .unwrap();
        assert!(!hist.contains("sk-secret"), "{hist}");
        let mut log = String::new();
        std::io::Read::read_to_string(&mut zip.by_name("comfyui.log").unwrap(), &mut log).unwrap();
        assert!(!log.contains("Users\\ana"), "{log}");
        assert!(built.redaction.total > 0);
    }

    #[test]
    fn bad_inputs_are_one_line_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("comfyui.log");
        std::fs::write(&log, "got prompt\n").unwrap();
        let bad = tmp.path().join("w.json");
        std::fs::write(&bad, "{not json").unwrap();
        let req = Request {
            dir: None,
            failure: None,
            output: Some(tmp.path().join("b.zip")),
            redact: true,
            comfyui: None,
            python: None,
            nvml_lib: None,
        };
        let e = build(
            &req,
            &FailureFiles {
                log: log.clone(),
                workflow: Some(bad),
                history: None,
            },
        )
        .unwrap_err();
        assert!(e.message.contains("is not JSON"), "{e}");
        let e = build(
            &req,
            &FailureFiles {
                log: tmp.path().join("missing.log"),
                workflow: None,
                history: None,
            },
        )
        .unwrap_err();
        assert!(e.message.contains("missing.log"), "{e}");
        let wrong = Request {
            output: Some(tmp.path().join("b.tar")),
            ..req
        };
        let e = build(
            &wrong,
            &FailureFiles {
                log,
                workflow: None,
                history: None,
            },
        )
        .unwrap_err();
        assert!(e.message.contains("does not end in .zip"), "{e}");
    }
}
