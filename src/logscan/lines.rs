//! What one normalised log line means to the structure of a log: a server start, a prompt
//! starting or ending, a model load, an exception, the launch flags.
//!
//! The failure signatures are in the catalogue (`classify::catalogue`); these are the lines
//! that cut a log into server starts and prompts (`comfy/model_management.py`, `main.py`, `server.py`, `execution.py`; real logs in `fixtures/logs/`).

use serde::Serialize;

/// A kind of structural line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A line that only appears while ComfyUI starts; `rank` orders them within one start
    /// (argparse runs first, then ComfyUI-Manager's pre-start banner, then ComfyUI itself), so
    /// a rank at or below one already seen means a new start.
    Start { rank: u8 },
    /// A line of the startup that may come before the start markers (`Dynamic vram disabled
    /// with argument.`): it joins the start in progress, or begins one.
    Announce,
    /// `To see the GUI go to: …`: the server is ready.
    Ready,
    /// `Stopped server` after Ctrl-C.
    Stopped,
    /// `got prompt`: a POST to /prompt (logged before the prompt is validated).
    GotPrompt,
    /// `Prompt executed in …`: printed after every prompt, failed and interrupted ones too.
    Executed,
    /// `invalid prompt: {…}`: the last POST was refused (HTTP 400).
    InvalidPrompt,
    /// `Error handling request from …`: the last POST failed (HTTP 500).
    RequestError,
    /// `Failed to validate prompt for output N:` (followed by `invalid prompt` when nothing is
    /// left to run).
    FailedValidation,
    /// `Requested to load X`.
    RequestedToLoad,
    /// A model finished loading (legacy, older and Dynamic VRAM formats, `comfy/model_management.py`).
    Loaded,
    /// `Traceback (most recent call last):`.
    Traceback,
    /// A traceback frame (`File "…", line 239, in f`, or faulthandler's `… line 239 in f`):
    /// an exception was raised, even when the excerpt lost its header and its last line.
    Frame,
    /// `!!! Exception during processing !!! …`.
    ExceptionDuring,
    /// The Error Report's `- **Exception Message:** …` (or its rendered `Exception Message:
    /// …`): the exception that ended the prompt, as the frontend reports it.
    ReportException,
    /// The pre-2025 frontend's error dialog (`Error occurred when executing KSampler:`, the
    /// exception's message on the next line that has text, then the executor's frames): a
    /// prompt failed in that node.
    PopupNode,
    /// `Processing interrupted`.
    Interrupted,
    /// A tqdm bar (`… 3/20 [00:07<00:40,  2.51s/it]`): a node at work, so a prompt runs.
    Progress,
    /// A line that may carry ComfyUI's launch flags.
    LaunchArgs,
    /// ComfyUI-Manager's `** ComfyUI Path:` / `** Log path:`.
    InstallPath,
}

/// One structural line, as data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Marker {
    pub kind: Kind,
    /// How the normalised line begins (`at_start`) or a text it contains.
    pub text: &'static str,
    pub at_start: bool,
    /// The pre-filter needle (a regular expression of plain text) that finds the raw line.
    pub needle: &'static str,
}

const fn m(kind: Kind, text: &'static str, at_start: bool, needle: &'static str) -> Marker {
    Marker {
        kind,
        text,
        at_start,
        needle,
    }
}

const TRACEBACK: &str = "Traceback (most recent call last):";

/// The structural lines, in the order they are tried.
pub(crate) const MARKERS: &[Marker] = &[
    m(
        Kind::Start { rank: 0 },
        "usage: main.py",
        true,
        r"usage: main\.py",
    ),
    m(
        Kind::Start { rank: 1 },
        "[START] Security scan",
        true,
        r"\[START\] Security scan",
    ),
    m(
        Kind::Start { rank: 1 },
        "[PRE] ComfyUI-Manager",
        true,
        r"\[PRE\] ComfyUI-Manager",
    ),
    m(
        Kind::Start { rank: 2 },
        "ComfyUI startup time:",
        true,
        r"ComfyUI startup time:",
    ),
    m(
        Kind::Start { rank: 3 },
        "Prestartup times for custom nodes:",
        true,
        r"Prestartup times for custom nodes",
    ),
    m(
        Kind::Start { rank: 4 },
        "Checkpoint files will always be loaded safely.",
        true,
        r"Checkpoint files will always be loaded safely",
    ),
    m(Kind::Start { rank: 5 }, "Total VRAM ", true, r"Total VRAM "),
    m(
        Kind::Announce,
        "Dynamic vram disabled with argument",
        true,
        r"Dynamic vram disabled with argument",
    ),
    // comfy-aimdo's first word, before ComfyUI's own (`aimdo: src/control.c:69:INFO:…`).
    m(
        Kind::Announce,
        "comfy-aimdo inited for GPU: ",
        false,
        r"comfy-aimdo inited for GPU: ",
    ),
    // `docker compose up` attaching to the container it starts.
    m(Kind::Announce, "Attaching to ", true, r"Attaching to "),
    m(
        Kind::Announce,
        "DynamicVRAM support detected and enabled",
        true,
        r"DynamicVRAM support detected and enabled",
    ),
    m(
        Kind::Announce,
        "No working comfy-aimdo install detected",
        true,
        r"No working comfy-aimdo install detected",
    ),
    // The version lines can come before any line that starts a startup block (an excerpt,
    // a launcher that prints them first): they belong to a start all the same.
    m(
        Kind::Announce,
        "ComfyUI version: ",
        true,
        r"ComfyUI version: ",
    ),
    m(
        Kind::Announce,
        "pytorch version: ",
        true,
        r"pytorch version: ",
    ),
    // Lines only a start prints, which an excerpt may hold without the markers above.
    m(
        Kind::Announce,
        "Adding extra search path ",
        true,
        r"Adding extra search path ",
    ),
    m(
        Kind::Announce,
        "Import times for custom nodes:",
        true,
        r"Import times for custom nodes:",
    ),
    m(
        Kind::Announce,
        "Context impl SQLiteImpl.",
        true,
        r"Context impl SQLiteImpl\.",
    ),
    m(
        Kind::Announce,
        "Starting ComfyUI",
        true,
        r"Starting ComfyUI",
    ),
    m(
        Kind::Announce,
        "Unsupported Pytorch detected",
        true,
        r"Unsupported Pytorch detected",
    ),
    // The newest startups: the quantized-ops backends probed at import
    // (`comfy/quant_ops.py`), the assets database's migrations.
    m(
        Kind::Announce,
        "Found comfy_kitchen backend ",
        true,
        r"Found comfy_kitchen backend ",
    ),
    m(
        Kind::Announce,
        "setup plugin alembic.",
        true,
        r"setup plugin alembic\.",
    ),
    m(
        Kind::Ready,
        "To see the GUI go to: ",
        true,
        r"To see the GUI go to: ",
    ),
    m(Kind::Stopped, "Stopped server", true, r"Stopped server"),
    m(Kind::GotPrompt, "got prompt", true, r"got prompt"),
    m(
        Kind::Executed,
        "Prompt executed in ",
        true,
        r"Prompt executed in ",
    ),
    m(
        Kind::InvalidPrompt,
        "invalid prompt: ",
        true,
        r"invalid prompt: ",
    ),
    // The frontend's popup words the same refusal (`Prompt execution failed` above it, or
    // before it on the line when the dialog's text is copied flat).
    m(
        Kind::InvalidPrompt,
        "Prompt outputs failed validation",
        false,
        r"Prompt outputs failed validation",
    ),
    m(
        Kind::RequestError,
        "Error handling request from ",
        true,
        r"Error handling request from ",
    ),
    m(
        Kind::FailedValidation,
        "Failed to validate prompt for output",
        true,
        r"Failed to validate prompt for output",
    ),
    m(
        Kind::RequestedToLoad,
        "Requested to load ",
        true,
        r"Requested to load ",
    ),
    m(
        Kind::Loaded,
        "loaded completely",
        true,
        r"loaded completely",
    ),
    m(Kind::Loaded, "loaded partially", true, r"loaded partially"),
    // `--verbose DEBUG`'s line for each module a lowvram load puts on the GPU.
    m(
        Kind::Loaded,
        "lowvram: loaded module regularly ",
        true,
        r"lowvram: loaded module regularly ",
    ),
    m(
        Kind::Loaded,
        "loaded in lowvram mode",
        true,
        r"loaded in lowvram mode",
    ),
    m(
        Kind::Loaded,
        " prepared for dynamic VRAM loading",
        false,
        r" prepared for dynamic VRAM loading",
    ),
    // Also at a line's end: a console that lost a newline glues it to the line before
    // (`…\custom_nodes\ComfyUI-ManagerTraceback (most recent call last):`; see `marker`).
    m(
        Kind::Traceback,
        TRACEBACK,
        true,
        r"Traceback \(most recent call last\)",
    ),
    m(Kind::Frame, "File \"", false, r#"File ""#),
    m(
        Kind::ExceptionDuring,
        "!!! Exception during processing !!!",
        true,
        r"!!! Exception during processing !!!",
    ),
    // Its 2024 form (`execution.py`, 5d08802f until the execution model inversion).
    m(
        Kind::ExceptionDuring,
        "!!! Exception during processing!!!",
        true,
        r"!!! Exception during processing!!!",
    ),
    m(
        Kind::ReportException,
        "- **Exception Message:** ",
        true,
        r"- \*\*Exception Message:\*\* ",
    ),
    m(
        Kind::ReportException,
        "Exception Message: ",
        true,
        r"Exception Message: ",
    ),
    m(
        Kind::PopupNode,
        "Error occurred when executing ",
        true,
        r"Error occurred when executing ",
    ),
    m(
        Kind::Interrupted,
        "Processing interrupted",
        true,
        r"Processing interrupted",
    ),
    // The server's word that the user cancelled the running prompt (`/interrupt` with its
    // id); `Processing interrupted` follows once the node stops.
    m(
        Kind::Interrupted,
        "Interrupting prompt ",
        true,
        r"Interrupting prompt ",
    ),
    m(Kind::Progress, "it/s]", false, r"it/s\]"),
    m(Kind::Progress, "s/it]", false, r"s/it\]"),
    // A bar cut before its rate (`WanVAE encoding frames: 100%|█████`).
    m(
        Kind::Progress,
        "%|",
        false,
        r"0%\||1%\||2%\||3%\||4%\||5%\||6%\||7%\||8%\||9%\|",
    ),
    m(Kind::LaunchArgs, "main.py", false, r"main\.py"),
    m(Kind::LaunchArgs, "Launch args:", false, r"Launch args:"),
    m(Kind::LaunchArgs, "\"argv\"", false, r#""argv""#),
    m(Kind::LaunchArgs, "**Arguments", false, r"\*\*Arguments"),
    m(Kind::InstallPath, "ComfyUI Path: ", true, r"ComfyUI Path: "),
    m(Kind::InstallPath, "Log path: ", true, r"Log path: "),
];

/// The marker a normalised line is: one it begins with, else the first one it contains.
pub(crate) fn marker(text: &str) -> Option<&'static Marker> {
    // Called for every line the pre-filter lets through: compare only the markers that begin
    // with the line's first byte, and look for the others in one search.
    let first = *text.as_bytes().first()?;
    if let Some(m) = MARKERS
        .iter()
        .find(|m| m.at_start && m.text.as_bytes()[0] == first && text.starts_with(m.text))
    {
        return Some(m);
    }
    if text.trim_end().ends_with(TRACEBACK) {
        return MARKERS.iter().find(|m| m.kind == Kind::Traceback);
    }
    let found = anywhere().find(text)?;
    MARKERS
        .iter()
        .find(|m| !m.at_start && m.text == found.as_str())
}

/// The markers found anywhere in a line, as one search.
fn anywhere() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        let alternation: Vec<String> = MARKERS
            .iter()
            .filter(|m| !m.at_start)
            .map(|m| regex::escape(m.text))
            .collect();
        regex::Regex::new(&alternation.join("|")).expect("marker search compiles")
    })
}

/// A tqdm bar (`… 20/20 [00:05<00:00,  3.71it/s]`, `1.02s/it]`, or one cut before its rate:
/// `frames: 100%|█████`): what the `Progress` markers find.
pub(crate) fn is_progress(text: &str) -> bool {
    marker(text).is_some_and(|m| m.kind == Kind::Progress)
}

/// A tqdm bar's count: (done, total) of `… 12/20 [00:07<00:05, …]`.
pub(crate) fn bar_count(text: &str) -> Option<(u64, u64)> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| regex::Regex::new(r"(\d+)/(\d+) \[").expect("bar count regex"));
    let c = re.captures_iter(text).last()?;
    Some((c[1].parse().ok()?, c[2].parse().ok()?))
}

/// A line a node prints at work (loading, sampling, encoding, the memory it uses): in an
/// excerpt that shows neither a start nor a prompt, lines like these at its end mean a prompt
/// was running when it was cut. Tables (PyTorch's memory summary) are not.
pub(crate) fn is_work(text: &str) -> bool {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let t = text.trim_start();
    // Not a table row, nor an Error Report's Markdown list (`- **VRAM Total:** …`), nor a
    // startup's import-time list (`0.3 seconds: …\custom_nodes\ComfyUI-RK-Sampler`).
    !t.starts_with('|')
        && !t.starts_with("- **")
        && !is_import_time(t)
        && RE
            .get_or_init(|| {
                regex::Regex::new(
                    r"(?i)\b(?:v?ram|vae|models?|lora|sampl(?:e|er|ers|ing)|steps?|frames?|encod(?:e|ed|ing)|decod(?:e|ed|ing)|block ?swap|latents?|torch\.Size|unet|dit|loader|vbar|allocated|inference|denois(?:e|ing)|processing|upscal(?:e|ing))\b",
                )
                .expect("work regex")
            })
            .is_match(t)
}

/// A shell's prompt on a line of its own, as it comes back when the process it ran has ended:
/// cmd's `D:\ComfyUI_windows_portable>` (also cut mid-path by the copy: `D:\ComfyUI_windows_`),
/// PowerShell's `PS C:\ComfyUI>`, and `user@host:~/ComfyUI$`, `(venv) root@box:/workspace#`,
/// `[user@host ComfyUI]$`. A command typed after it (`…>python main.py`) is no prompt alone.
pub(crate) fn is_shell_prompt(text: &str) -> bool {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let t = text.trim();
    let matched = RE
        .get_or_init(|| {
            regex::Regex::new(
                r#"^(?:PS )?[A-Za-z]:\\[^:*?"<>|]*>?$|^(?:\([^)]*\) ?)?[\w.-]+@[\w.-]+:[^\s:]*[$#]$|^(?:\([^)]*\) ?)?\[[\w.-]+@[\w.-]+ [^\]]*\][$#]$"#,
            )
            .expect("shell prompt regex")
        })
        .is_match(t);
    // A path cut before its `>` is a prompt only if it names no file (a node prints the
    // `…\output\ComfyUI_00001.mp4` it wrote).
    matched
        && (t.ends_with('>')
            || t.ends_with('$')
            || t.ends_with('#')
            || !t.rsplit(['\\', '/']).next().unwrap_or("").contains('.'))
}

/// A shell command that prints a log written elsewhere (`tail -n 50 comfyui.log`,
/// `Get-Content … -Tail 8`, `docker compose logs`, `journalctl -u comfyui`), typed at a prompt.
pub(crate) fn is_view_command(text: &str) -> bool {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(
            r"(?:^(?:PS )?[A-Za-z]:\\[^>]*>|[$#]) *(?:sudo +)?(?:tail|cat|less|more|head|type|Get-Content|gc|docker(?: compose)? logs|docker-compose logs|podman logs|kubectl logs|journalctl)\b",
        )
        .expect("view command regex")
    })
    .is_match(text.trim())
}

/// The user stopping what runs in a console: `^C`, Python's `KeyboardInterrupt`, cmd's
/// `Terminate batch job (Y/N)?`.
pub(crate) fn is_user_stop(text: &str) -> bool {
    let t = text.trim();
    t.starts_with("^C")
        || t.starts_with("KeyboardInterrupt")
        || t.starts_with("Terminate batch job")
}

/// `docker compose up`'s list of the containers it attaches to: `comfyui-1, db-1`.
pub(crate) fn container_names(names: &str) -> bool {
    !names.is_empty()
        && names.split(", ").all(|n| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
}

/// A line of the startup's `Import times for custom nodes:` list: `0.3 seconds: DIR`,
/// `0.0 seconds (IMPORT FAILED): DIR`.
fn is_import_time(t: &str) -> bool {
    let Some((secs, rest)) = t.split_once(" seconds") else {
        return false;
    };
    secs.parse::<f64>().is_ok() && (rest.starts_with(':') || rest.starts_with(" ("))
}

/// `Requested to load LTXAV` → `LTXAV`.
pub(crate) fn requested_model(text: &str) -> Option<&str> {
    text.strip_prefix("Requested to load ")
        .and_then(|r| r.split_whitespace().next())
}

/// `Prompt executed in 3.21 seconds` → `3.21 seconds`.
pub(crate) fn executed_in(text: &str) -> Option<&str> {
    text.strip_prefix("Prompt executed in ").map(str::trim)
}

/// The last line of a Python traceback: `torch.OutOfMemoryError: CUDA out of memory…` →
/// (`torch.OutOfMemoryError`, `CUDA out of memory…`). Frames are indented; this is not.
pub(crate) fn exception_line(text: &str) -> Option<(&str, &str)> {
    if text.starts_with(char::is_whitespace) {
        return None;
    }
    let (ty, msg) = match text.split_once(':') {
        Some((ty, msg)) => (ty, msg.strip_prefix(' ').unwrap_or(msg)),
        None => (text.trim_end(), ""),
    };
    let mut chars = ty.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = ty
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    // A bare name must still look like an exception (`KeyboardInterrupt`, `MemoryError`).
    let looks = !msg.is_empty()
        || ["Error", "Exception", "Interrupt", "Exit"]
            .iter()
            .any(|s| ty.ends_with(s));
    (first_ok && rest_ok && looks && !ty.is_empty()).then_some((ty, msg))
}

/// Where the launch flags were read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LaunchArgs {
    /// ComfyUI's arguments (after `main.py`).
    pub args: Vec<String>,
    /// The line they were read from.
    pub source: String,
    pub line: u64,
}

/// Reads ComfyUI's flags from a line that shows them: an echoed command line
/// (`C:\ComfyUI_windows_portable>.\python_embeded\python.exe -s ComfyUI\main.py --windows-standalone-build`,
/// `python main.py --lowvram`), a launcher's `** Launch args:` line, the frontend error
/// report's `**Arguments:** main.py …`, or `/system_stats`'s `"argv": ["main.py", …]`.
pub(crate) fn launch_args(text: &str) -> Option<Vec<String>> {
    let text = text.trim();
    if let Some(at) = text.find("\"argv\"") {
        let rest = &text[at..];
        let open = rest.find('[')?;
        let close = rest.find(']')?;
        let list: Vec<String> = serde_json::from_str(&rest[open..=close]).ok()?;
        return Some(after_main_py(&list).unwrap_or(list));
    }
    for label in ["Launch args:", "**Arguments:**", "**Arguments**:"] {
        if let Some(at) = text.find(label) {
            let words = split_words(&text[at + label.len()..]);
            return Some(after_main_py(&words).unwrap_or(words));
        }
    }
    // A shell or cmd prompt before the command: `C:\dir>`, `$ `, `PS C:\dir> `.
    let command = match text.find('>') {
        Some(i) if text[..i].contains(':') || text.starts_with("PS ") => &text[i + 1..],
        _ => text.strip_prefix("$ ").unwrap_or(text),
    };
    let words = split_words(command);
    let at = words.iter().position(|w| is_main_py(w))?;
    let python = words[..at].iter().any(|w| {
        let base = w
            .rsplit(['/', '\\'])
            .next()
            .unwrap_or(w)
            .to_ascii_lowercase();
        base.starts_with("python") || base == "py" || base == "py.exe"
    });
    python.then(|| words[at + 1..].to_vec())
}

fn is_main_py(word: &str) -> bool {
    let w = word.to_ascii_lowercase();
    w == "main.py" || w.ends_with("/main.py") || w.ends_with("\\main.py")
}

fn after_main_py(words: &[String]) -> Option<Vec<String>> {
    let at = words.iter().position(|w| is_main_py(w))?;
    Some(words[at + 1..].to_vec())
}

/// Whitespace splitting that keeps `"quoted words"` together (enough for flags and paths).
pub(crate) fn split_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut has = false;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '"') | (None, '\'') => {
                quote = Some(c);
                has = true;
            }
            (None, c) if c.is_whitespace() => {
                if has {
                    out.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            (_, c) => {
                cur.push(c);
                has = true;
            }
        }
    }
    if has {
        out.push(cur);
    }
    out
}

/// The ComfyUI folder from ComfyUI-Manager's banner: `ComfyUI Path: DIR`, or a
/// `Log path: DIR/user/comfyui.log` (older Manager versions kept the log elsewhere).
pub(crate) fn install_dir(text: &str) -> Option<String> {
    if let Some(p) = text.strip_prefix("ComfyUI Path: ") {
        return Some(p.trim().to_string()).filter(|p| !p.is_empty());
    }
    let p = text.strip_prefix("Log path: ")?.trim();
    for sep in ['/', '\\'] {
        let suffix = format!("{sep}user{sep}comfyui.log");
        if let Some(dir) = p.strip_suffix(&suffix) {
            return Some(dir.to_string()).filter(|d| !d.is_empty());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_table() {
        let cases: &[(&str, Option<Kind>)] = &[
            ("got prompt", Some(Kind::GotPrompt)),
            ("Prompt executed in 0.01 seconds", Some(Kind::Executed)),
            ("Prompt executed in 00:12:30", Some(Kind::Executed)),
            (
                "Total VRAM 24106 MB, total RAM 24106 MB",
                Some(Kind::Start { rank: 5 }),
            ),
            (
                "ComfyUI startup time: 2026-05-22 10:00:00.123",
                Some(Kind::Start { rank: 2 }),
            ),
            (
                "usage: main.py [-h] [--listen [IP]]",
                Some(Kind::Start { rank: 0 }),
            ),
            (
                "To see the GUI go to: http://127.0.0.1:8199",
                Some(Kind::Ready),
            ),
            ("Requested to load WanVAE", Some(Kind::RequestedToLoad)),
            (
                "loaded completely; 6063.82 MB usable, 242.03 MB loaded, full load: True",
                Some(Kind::Loaded),
            ),
            (
                "loaded completely 12023.667979049682 7909.737449645996 True",
                Some(Kind::Loaded),
            ),
            (
                "loaded partially; 0.00 MB usable, 0.00 MB loaded, 27252.97 MB offloaded, 1170.23 MB buffer reserved, lowvram patches: 1053",
                Some(Kind::Loaded),
            ),
            ("loaded in lowvram mode 2048.0", Some(Kind::Loaded)),
            (
                "Model Krea2 prepared for dynamic VRAM loading. 12864MB Staged. 256 patches attached.",
                Some(Kind::Loaded),
            ),
            ("Traceback (most recent call last):", Some(Kind::Traceback)),
            (
                "   0.1 seconds: C:\\p\\ComfyUI\\custom_nodes\\ComfyUI-ManagerTraceback (most recent call last):",
                Some(Kind::Traceback),
            ),
            (
                "!!! Exception during processing !!! Allocation on device ",
                Some(Kind::ExceptionDuring),
            ),
            ("Processing interrupted", Some(Kind::Interrupted)),
            (
                "Error occurred when executing KSampler:",
                Some(Kind::PopupNode),
            ),
            (
                "invalid prompt: {'type': 'prompt_no_outputs', 'message': 'Prompt has no outputs', 'details': '', 'extra_info': {}}",
                Some(Kind::InvalidPrompt),
            ),
            (
                "Error handling request from 127.0.0.1",
                Some(Kind::RequestError),
            ),
            ("Stopped server", Some(Kind::Stopped)),
            ("Using pytorch attention", None),
            (
                " 45%|████▌     | 9/20 [00:04<00:05,  2.1it/s]",
                Some(Kind::Progress),
            ),
            // Any bar (a download's too: the state reads bars only once the server is up or
            // a prompt was seen).
            (
                "Fetching 5 files: 100%|█████| 5/5 [00:00<00:00, 12.1MB/s]",
                Some(Kind::Progress),
            ),
            ("| Active memory         |   9598 MiB |", None),
            (
                "  File \"/home/user/ComfyUI/main.py\", line 149, in <module>",
                Some(Kind::Frame),
            ),
            (
                "  File \"C:\\x\\nodes.py\", line 12 in load",
                Some(Kind::Frame),
            ),
        ];
        for (text, kind) in cases {
            assert_eq!(marker(text).map(|m| m.kind), *kind, "{text}");
        }
    }

    #[test]
    fn launch_args_forms() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases: &[(&str, Option<Vec<String>>)] = &[
            (
                r"C:\ComfyUI_windows_portable>.\python_embeded\python.exe -s ComfyUI\main.py --windows-standalone-build --enable-manager",
                Some(s(&["--windows-standalone-build", "--enable-manager"])),
            ),
            (
                "python3 main.py --fp16-unet --disable-smart-memory --async-offload",
                Some(s(&[
                    "--fp16-unet",
                    "--disable-smart-memory",
                    "--async-offload",
                ])),
            ),
            ("$ python main.py", Some(vec![])),
            (
                r#"  "argv": ["main.py", "--cpu", "--listen", "127.0.0.1"],"#,
                Some(s(&["--cpu", "--listen", "127.0.0.1"])),
            ),
            (
                "- **Arguments:** main.py --windows-standalone-build --reserve-vram 2",
                Some(s(&["--windows-standalone-build", "--reserve-vram", "2"])),
            ),
            (
                r#"Launch args: --output-directory "D:\My Images" --lowvram"#,
                Some(s(&["--output-directory", r"D:\My Images", "--lowvram"])),
            ),
            (
                "  File \"/home/user/ComfyUI/main.py\", line 149, in <module>",
                None,
            ),
            ("usage: main.py [-h] [--listen [IP]]", None),
            ("main.py: error: unrecognized arguments: --foo", None),
        ];
        for (text, expected) in cases {
            assert_eq!(launch_args(text), *expected, "{text}");
        }
    }

    #[test]
    fn progress_bars() {
        assert!(is_progress(" 45%|████▌     | 9/20 [00:04<00:05,  2.1it/s]"));
        assert!(is_progress(
            "100%|██████████| 20/20 [00:21<00:00,  1.02s/it]"
        ));
        assert!(is_progress("  0%|          | 0/20 [00:00<?, ?it/s]"));
        assert!(!is_progress("Requested to load SDXL"));
        assert!(is_progress("WanVAE encoding frames: 100%|█████████"));
        assert!(is_work(
            "[INFO] 🧮 Before BlockSwap: VRAM: 7.26/9.50GB (peak: 9.48GB)"
        ));
        assert!(is_work(
            "[WanVAE encode] Max allocated memory: max_memory=5.627 GB"
        ));
        assert!(!is_work(
            "| Active memory         |   9598 MiB |   9943 MiB |"
        ));
        assert!(!is_work(
            "WAS Node Suite: Finished. Loaded 220 nodes successfully."
        ));
        assert!(!is_work(
            r"   0.3 seconds: C:\ComfyUI\custom_nodes\ComfyUI-RK-Sampler"
        ));
        assert!(!is_work(
            r"   0.0 seconds (IMPORT FAILED): C:\ComfyUI\custom_nodes\comfyui-lora-manager"
        ));
    }

    #[test]
    fn shell_prompts() {
        for p in [
            r"D:\ComfyUI_windows_portable>",
            r"C:\Users\A B\Desktop\ComfyUI_windows_",
            r"PS C:\ComfyUI> ",
            "root@c7b1:/workspace/ComfyUI#",
            "(venv) me@box:~/ComfyUI$ ",
            "[me@fedora ComfyUI]$",
        ] {
            assert!(is_shell_prompt(p), "{p}");
        }
        for line in [
            r"D:\ComfyUI_windows_portable>.\python_embeded\python.exe -s ComfyUI\main.py",
            r"D:\ComfyUI\custom_nodes\x\__init__.py:12: UserWarning: deprecated",
            r"   0.0 seconds: D:\ComfyUI\custom_nodes\ComfyUI-Manager",
            "Requested to load SD1",
            "user@example.com: login required $",
        ] {
            assert!(!is_shell_prompt(line), "{line}");
        }
    }

    #[test]
    fn exception_lines() {
        assert_eq!(
            exception_line(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.14 GiB."
            ),
            Some((
                "torch.OutOfMemoryError",
                "CUDA out of memory. Tried to allocate 1.14 GiB."
            ))
        );
        assert_eq!(
            exception_line(
                "Exception: **** ERROR: Saving image outside the output folder is not allowed."
            ),
            Some((
                "Exception",
                "**** ERROR: Saving image outside the output folder is not allowed."
            ))
        );
        assert_eq!(
            exception_line("KeyboardInterrupt"),
            Some(("KeyboardInterrupt", ""))
        );
        assert_eq!(exception_line("    ^^^^^^^^"), None);
        assert_eq!(exception_line("  File \"x.py\", line 1"), None);
        assert_eq!(
            exception_line("During handling of the above exception, another exception occurred:"),
            None
        );
        assert_eq!(exception_line("Memory summary:"), None);
    }

    #[test]
    fn install_dirs() {
        assert_eq!(
            install_dir("ComfyUI Path: /app/ComfyUI").as_deref(),
            Some("/app/ComfyUI")
        );
        assert_eq!(
            install_dir(r"Log path: C:\ComfyUI_windows_portable\ComfyUI\user\comfyui.log")
                .as_deref(),
            Some(r"C:\ComfyUI_windows_portable\ComfyUI")
        );
        assert_eq!(install_dir(r"Log path: D:\portable\comfyui.log"), None);
        assert_eq!(install_dir("Log path: file logging is disabled"), None);
    }
}
