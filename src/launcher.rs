//! Reading how a user starts ComfyUI: a Windows `.bat`, a POSIX `.sh`, or a command line.
//!
//! The portable build starts with `run_nvidia_gpu.bat`:
//! `.\python_embeded\python.exe -s ComfyUI\main.py --windows-standalone-build`, maybe with
//! `set VAR=…` lines, `%*` to pass on its own arguments, `REM`/`::` comments, `^`
//! continuations, CRLF endings and a final `pause`. Linux users have a shell script with
//! `export`, `source venv/bin/activate` and `python main.py "$@"`. Both come down to the
//! same thing: the environment, the interpreter and the flags of the `main.py` call.

use crate::error::{Error, Result};
use crate::flags::decide::Platform;
use serde::Serialize;
use std::path::Path;

/// Environment variables that change what ComfyUI does with memory or devices.
pub const RELEVANT_ENV: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "HIP_VISIBLE_DEVICES",
    "CUDA_MODULE_LOADING",
    "CUDA_DEVICE_ORDER",
];

/// Where to put launch flags on an install, and the line to put there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct StartLine {
    /// For a person: the file or setting, and what to do there.
    #[serde(rename = "where")]
    pub place: String,
    /// The line (for Desktop, the flags alone).
    pub line: String,
}

/// How to start an install of `kind` (its `python` and ComfyUI folder `comfyui`) with
/// `flags`: the portable build's `.bat` line, Desktop's setting, or the Python and `main.py`.
pub(crate) fn start_line(
    kind: crate::locate::InstallKind,
    python: &str,
    comfyui: &Path,
    flags: &[String],
) -> StartLine {
    use crate::locate::InstallKind;
    use crate::text::command_line;
    match kind {
        InstallKind::Portable => {
            // The .bat's line carries --windows-standalone-build already.
            let flags: Vec<String> = flags
                .iter()
                .filter(|f| *f != "--windows-standalone-build")
                .cloned()
                .collect();
            let mut line = PORTABLE_LINE.to_string();
            if !flags.is_empty() {
                line = format!("{line} {}", command_line(&flags));
            }
            StartLine {
                place: "run_nvidia_gpu.bat in your ComfyUI_windows_portable folder: edit its python line to read".into(),
                line,
            }
        }
        InstallKind::Desktop => StartLine {
            place: "ComfyUI Desktop: Settings > Server-Config, set these launch flags (or add them to its extra arguments)".into(),
            line: command_line(flags),
        },
        InstallKind::Python => {
            let mut argv = vec![
                python.to_string(),
                comfyui.join("main.py").display().to_string(),
            ];
            argv.extend(flags.iter().cloned());
            StartLine {
                place: "start ComfyUI with".into(),
                line: command_line(&argv),
            }
        }
    }
}

/// The portable build's `main.py` call in `run_nvidia_gpu.bat`.
pub(crate) const PORTABLE_LINE: &str =
    r".\python_embeded\python.exe -s ComfyUI\main.py --windows-standalone-build";

/// A `main.py` call and what surrounds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Launch {
    /// The interpreter as written (`.\python_embeded\python.exe`), if any.
    pub python: Option<String>,
    /// Interpreter options before the script (`-s`).
    pub python_args: Vec<String>,
    /// The script as written (`ComfyUI\main.py`).
    pub script: Option<String>,
    /// ComfyUI's arguments, with the launcher's pass-through (`%*`, `"$@"`) filled in.
    pub args: Vec<String>,
    /// Variables the launcher sets before the call, in order.
    pub env: Vec<(String, String)>,
    /// The platform the launcher implies (a `.bat` means Windows).
    pub platform: Option<Platform>,
    /// The launcher passes its own arguments on (`%*`, `"$@"`).
    pub passthrough: bool,
    /// 1-based line of the call in the launcher file.
    pub line: Option<usize>,
}

impl Launch {
    /// Only flags, from a command line: `-- --highvram` or `-- python main.py --highvram`,
    /// also pasted as one quoted argument. A `.exe` interpreter or
    /// `--windows-standalone-build` (the portable build's) implies Windows.
    pub fn from_command_line(args: &[String]) -> Launch {
        let pasted = pasted_line(args);
        let args = pasted.as_deref().unwrap_or(args);
        let mut launch = Launch {
            python: None,
            python_args: Vec::new(),
            script: None,
            args: args.to_vec(),
            env: Vec::new(),
            platform: None,
            passthrough: false,
            line: None,
        };
        if let Some(at) = args.iter().position(|a| is_main_py(a)) {
            let (env, rest) = split_assignments(&args[..at]);
            launch.env = env;
            launch.python = rest.first().cloned();
            launch.python_args = rest.iter().skip(1).cloned().collect();
            launch.script = Some(args[at].clone());
            launch.args = args[at + 1..].to_vec();
        }
        let exe = launch
            .python
            .as_ref()
            .is_some_and(|p| p.to_ascii_lowercase().ends_with(".exe"));
        if exe
            || launch
                .args
                .iter()
                .any(|a| a == "--windows-standalone-build")
        {
            launch.platform = Some(Platform::Windows);
        }
        launch
    }

    /// The variables among [`RELEVANT_ENV`] that the launcher sets.
    pub fn relevant_env(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .filter(|(k, _)| RELEVANT_ENV.iter().any(|r| r.eq_ignore_ascii_case(k)))
            .cloned()
            .collect()
    }
}

/// Reads a launcher file; `extra` fills its pass-through (or is appended when it has none).
pub fn read_file(path: &Path, extra: &[String]) -> Result<Launch> {
    let bytes = crate::input_file::read(path, "launcher", crate::input_file::MAX_SCRIPT)?;
    let text = crate::input_file::decode(&bytes);
    if text.contains('\0') {
        return Err(Error::usage(format!(
            "{} is not a launcher script (it is binary)",
            path.display()
        ))
        .hint("give the .bat or .sh file that starts ComfyUI"));
    }
    let text = text.trim_start_matches('\u{feff}');
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    {
        return parse_desktop_settings(text, extra).map_err(|why| {
            Error::usage(format!("{}: {why}", path.display())).hint(
                "give ComfyUI Desktop's user\\default\\comfy.settings.json, or pass the flags after --",
            )
        });
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let is_bat = match ext.as_deref() {
        Some("bat" | "cmd") => true,
        Some("sh" | "bash" | "zsh") => false,
        _ => {
            !text.starts_with("#!")
                && (text.contains("\r\n") || text.to_ascii_lowercase().contains("@echo"))
        }
    };
    let parsed = if is_bat {
        parse_bat(text, extra)
    } else {
        parse_sh(text, extra)
    };
    parsed.ok_or_else(|| {
        Error::usage(format!(
            "{} has no line that starts ComfyUI (no main.py call found)",
            path.display()
        ))
        .hint("give the launcher that runs 'python main.py', or pass the flags after --")
    })
}

/// Reads ComfyUI Desktop's settings (`<base>/user/default/comfy.settings.json`): Desktop
/// starts ComfyUI with the flags of `Comfy.Server.LaunchArgs`, an object of flag names
/// without their dashes and string values (empty for a switch), which its Server-Config
/// settings page writes. `extra` is appended.
pub fn parse_desktop_settings(text: &str, extra: &[String]) -> std::result::Result<Launch, String> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not a JSON settings file ({e})"))?;
    let Some(settings) = json.as_object() else {
        return Err("not a settings file (not a JSON object)".into());
    };
    let mut args = Vec::new();
    match settings.get("Comfy.Server.LaunchArgs") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Object(launch)) => {
            for (name, value) in launch {
                let name = name.trim_start_matches('-');
                if name.is_empty() {
                    continue;
                }
                args.push(format!("--{name}"));
                match value {
                    serde_json::Value::String(v) if v.is_empty() => {}
                    serde_json::Value::String(v) => args.push(v.clone()),
                    serde_json::Value::Bool(true) | serde_json::Value::Null => {}
                    serde_json::Value::Bool(false) => {
                        args.pop();
                    }
                    other => args.push(other.to_string()),
                }
            }
        }
        Some(_) => return Err("Comfy.Server.LaunchArgs is not an object of flags".into()),
    }
    args.extend(extra.iter().cloned());
    Ok(Launch {
        python: None,
        python_args: Vec::new(),
        script: None,
        args,
        env: Vec::new(),
        platform: None,
        passthrough: false,
        line: None,
    })
}

/// Reads a Windows batch file.
pub fn parse_bat(text: &str, extra: &[String]) -> Option<Launch> {
    let mut env: Vec<(String, String)> = Vec::new();
    for (line_no, line) in logical_lines(text, '^') {
        let line = line.trim().trim_start_matches('@').trim();
        let lower = line.to_ascii_lowercase();
        if line.is_empty()
            || line.starts_with("::")
            || line.starts_with(':')
            || lower == "rem"
            || lower.starts_with("rem ")
        {
            continue;
        }
        let first = lower.split_whitespace().next().unwrap_or("");
        if matches!(first, "echo" | "echo." | "title" | "start") {
            continue;
        }
        if first == "set" {
            if let Some((k, v)) = bat_set(&line[3..], &env) {
                env.retain(|(name, _)| !name.eq_ignore_ascii_case(&k));
                env.push((k, v));
            }
            continue;
        }
        let command = line
            .strip_prefix("call ")
            .or_else(|| line.strip_prefix("CALL "))
            .unwrap_or(line);
        // cmd.exe expands %VAR% before it splits the line into arguments.
        let tokens = bat_tokens(&bat_expand(command, &env));
        let Some(at) = tokens.iter().position(|t| is_main_py(t)) else {
            continue;
        };
        let mut args = Vec::new();
        let mut passthrough = false;
        for token in &tokens[at + 1..] {
            if token == "%*" {
                passthrough = true;
                args.extend(extra.iter().cloned());
            } else if is_positional_ref(token) {
                // %1 … %9: the launcher's own arguments, unknown here.
            } else {
                args.push(bat_expand(token, &env));
            }
        }
        if !passthrough {
            args.extend(extra.iter().cloned());
        }
        return Some(Launch {
            python: tokens
                .first()
                .filter(|_| at > 0)
                .map(|p| bat_expand(p, &env)),
            python_args: tokens[1.min(at)..at]
                .iter()
                .map(|t| bat_expand(t, &env))
                .collect(),
            script: Some(bat_expand(&tokens[at], &env)),
            args,
            env,
            platform: Some(Platform::Windows),
            passthrough,
            line: Some(line_no),
        });
    }
    None
}

/// Reads a POSIX shell script.
pub fn parse_sh(text: &str, extra: &[String]) -> Option<Launch> {
    let mut env: Vec<(String, String)> = Vec::new();
    for (line_no, line) in logical_lines(text, '\\') {
        let tokens = sh_tokens(line.trim(), &env);
        let Some(first) = tokens.first() else {
            continue;
        };
        if matches!(first.text.as_str(), "echo" | "printf") {
            continue;
        }
        if first.text == "export" || first.text == "declare" {
            let (assigned, _) = split_assignments(
                &tokens[1..]
                    .iter()
                    .map(|t| t.text.clone())
                    .collect::<Vec<_>>(),
            );
            for (k, v) in assigned {
                env.retain(|(name, _)| *name != k);
                env.push((k, v));
            }
            continue;
        }
        let words: Vec<String> = tokens.iter().map(|t| t.text.clone()).collect();
        let Some(at) = words.iter().position(|w| is_main_py(w)) else {
            let (assigned, rest) = split_assignments(&words);
            if rest.is_empty() {
                for (k, v) in assigned {
                    env.retain(|(name, _)| *name != k);
                    env.push((k, v));
                }
            }
            continue;
        };
        let (prefix_env, before) = split_assignments(&words[..at]);
        let before: Vec<String> = before
            .into_iter()
            .skip_while(|w| matches!(w.as_str(), "exec" | "nohup" | "command" | "env"))
            .collect();
        let mut args = Vec::new();
        let mut passthrough = false;
        for token in &tokens[at + 1..] {
            if token.all_args {
                passthrough = true;
                args.extend(extra.iter().cloned());
            } else if matches!(token.text.as_str(), "&" | "&&" | "||" | ";" | "|") {
                break;
            } else {
                args.push(token.text.clone());
            }
        }
        if !passthrough {
            args.extend(extra.iter().cloned());
        }
        env.extend(prefix_env);
        return Some(Launch {
            python: before.first().cloned(),
            python_args: before.iter().skip(1).cloned().collect(),
            script: Some(words[at].clone()),
            args,
            env,
            platform: None,
            passthrough,
            line: Some(line_no),
        });
    }
    None
}

/// A whole launch line given as one argument (`-- "python main.py --lowvram"`, flags copied
/// from a `.bat` as one string, a multi-line paste with its continuations): its words, split as
/// cmd.exe splits them where the line has Windows paths, else as a shell does. Only when it is
/// not one flag that ComfyUI's argparse would take whole: it holds `main.py`, a second flag, or
/// starts with a flag that has no `=` (`--reserve-vram 2`; argparse reads an argument with a
/// space and no `=` as a positional). `--output-directory=D:\my models` alone stays whole.
fn pasted_line(args: &[String]) -> Option<Vec<String>> {
    let [line] = args else {
        return None;
    };
    // Line continuations of a multi-line paste (`\` in a shell, `^` in cmd.exe), then the
    // line breaks themselves, are blanks between words.
    let line = ["\\\r\n", "\\\n", "^\r\n", "^\n", "\r\n", "\n"]
        .iter()
        .fold(line.clone(), |l, c| l.replace(c, " "));
    let line = line.trim();
    // PowerShell's call operator before a quoted program.
    let line = line.strip_prefix("& ").unwrap_or(line);
    if !line.contains(char::is_whitespace) {
        return None;
    }
    let windows = line.to_ascii_lowercase().contains(".exe")
        || line.contains(":\\")
        || line.contains(".\\")
        || (line.contains('\\') && !line.contains("\\ "));
    let words: Vec<String> = if windows {
        bat_tokens(line)
    } else {
        sh_tokens(line, &[]).into_iter().map(|t| t.text).collect()
    };
    let first_is_flag = words
        .first()
        .is_some_and(|w| w.starts_with('-') && !w.contains('='));
    let pasted = words.iter().any(|w| is_main_py(w))
        || first_is_flag
        || words.iter().skip(1).any(|w| w.starts_with('-'));
    (pasted && words.len() > 1).then_some(words)
}

fn is_main_py(token: &str) -> bool {
    let t = token.trim_matches('"').to_ascii_lowercase();
    t == "main.py" || t.ends_with("/main.py") || t.ends_with("\\main.py")
}

fn is_positional_ref(token: &str) -> bool {
    let t = token.trim_matches('"');
    t.len() == 2 && t.starts_with('%') && t.as_bytes()[1].is_ascii_digit()
}

/// Joins continuation lines (ending in `cont`) and numbers the result by its first line.
fn logical_lines(text: &str, cont: char) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if current.is_empty() {
            start = i + 1;
        }
        if let Some(body) = line.strip_suffix(cont) {
            // A doubled caret (`^^`) is an escaped caret, not a continuation.
            if cont == '^' && body.ends_with('^') {
                current.push_str(line);
            } else {
                current.push_str(body);
                continue;
            }
        } else {
            current.push_str(line);
        }
        out.push((start, std::mem::take(&mut current)));
    }
    if !current.is_empty() {
        out.push((start, current));
    }
    out
}

/// `set VAR=value` / `set "VAR=value"`; `set /a` and `set /p` are ignored.
fn bat_set(rest: &str, env: &[(String, String)]) -> Option<(String, String)> {
    let rest = rest.trim();
    if rest.starts_with('/') {
        return None;
    }
    let rest = rest
        .strip_prefix('"')
        .and_then(|r| r.rfind('"').map(|end| &r[..end]))
        .unwrap_or(rest);
    let (k, v) = rest.split_once('=')?;
    let k = k.trim();
    if k.is_empty() {
        return None;
    }
    Some((k.to_string(), bat_expand(v, env)))
}

/// Splits a batch command on unquoted blanks; `^` escapes the next character.
fn bat_tokens(line: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut has_token = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '^' if !quoted => {
                if let Some(next) = chars.next() {
                    current.push(next);
                    has_token = true;
                }
            }
            '"' => {
                quoted = !quoted;
                has_token = true;
            }
            ' ' | '\t' if !quoted => {
                if has_token {
                    tokens.push(std::mem::take(&mut current));
                    has_token = false;
                }
            }
            '&' | '|' if !quoted => break,
            c => {
                current.push(c);
                has_token = true;
            }
        }
    }
    if has_token {
        tokens.push(current);
    }
    tokens
}

/// Expands `%VAR%` from the launcher's own `set` lines; `%~dp0` is the launcher's folder.
fn bat_expand(token: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = token;
    while let Some(start) = rest.find('%') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        if let Some(stripped) = after.strip_prefix("~dp0") {
            out.push_str(".\\");
            rest = stripped;
            continue;
        }
        // `%*` and `%1`…`%9` are the launcher's own arguments: left for the caller.
        if after.starts_with('*') || after.starts_with(|c: char| c.is_ascii_digit()) {
            out.push('%');
            out.push_str(&after[..1]);
            rest = &after[1..];
            continue;
        }
        match after.find('%') {
            Some(end) if end > 0 => {
                let name = &after[..end];
                match env.iter().rev().find(|(k, _)| k.eq_ignore_ascii_case(name)) {
                    Some((_, v)) => out.push_str(v),
                    None => {
                        out.push('%');
                        out.push_str(name);
                        out.push('%');
                    }
                }
                rest = &after[end + 1..];
            }
            _ => {
                out.push('%');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A shell word, and whether it was `$@`/`"$@"`/`$*`.
struct ShToken {
    text: String,
    all_args: bool,
}

/// POSIX-ish word splitting with quotes, escapes, comments and `$VAR` expansion.
fn sh_tokens(line: &str, env: &[(String, String)]) -> Vec<ShToken> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut has_token = false;
    let mut all_args = false;
    let mut chars = line.chars().peekable();
    let lookup = |name: &str| -> String {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| std::env::var(name).unwrap_or_default())
    };
    let mut in_double = false;
    while let Some(c) = chars.next() {
        match c {
            '\'' if !in_double => {
                has_token = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    current.push(q);
                }
            }
            '"' => {
                in_double = !in_double;
                has_token = true;
            }
            '\\' => {
                if let Some(next) = chars.next() {
                    current.push(next);
                    has_token = true;
                }
            }
            '$' => {
                has_token = true;
                match chars.peek() {
                    Some('@') | Some('*') => {
                        chars.next();
                        all_args = true;
                    }
                    Some('{') => {
                        chars.next();
                        let name: String = chars.by_ref().take_while(|c| *c != '}').collect();
                        let name = name.split([':', '-']).next().unwrap_or("").to_string();
                        current.push_str(&lookup(&name));
                    }
                    Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
                        let mut name = String::new();
                        while let Some(c) = chars.peek() {
                            if c.is_ascii_alphanumeric() || *c == '_' {
                                name.push(*c);
                                chars.next();
                            } else {
                                break;
                            }
                        }
                        current.push_str(&lookup(&name));
                    }
                    _ => current.push('$'),
                }
            }
            '#' if !in_double && !has_token => break,
            ' ' | '\t' if !in_double => {
                if has_token {
                    tokens.push(ShToken {
                        text: std::mem::take(&mut current),
                        all_args,
                    });
                    has_token = false;
                    all_args = false;
                }
            }
            c => {
                current.push(c);
                has_token = true;
            }
        }
    }
    if has_token {
        tokens.push(ShToken {
            text: current,
            all_args,
        });
    }
    tokens
}

/// Splits leading `NAME=value` words off a command.
fn split_assignments(words: &[String]) -> (Vec<(String, String)>, Vec<String>) {
    let mut env = Vec::new();
    let mut i = 0;
    while i < words.len() {
        match words[i].split_once('=') {
            Some((k, v))
                if !k.is_empty()
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !k.starts_with(|c: char| c.is_ascii_digit()) =>
            {
                env.push((k.to_string(), v.to_string()));
                i += 1;
            }
            _ => break,
        }
    }
    (env, words[i..].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn a_line_pasted_as_one_argument_is_split() {
        let l = Launch::from_command_line(&s(&["python main.py --disable-dynamic-vram"]));
        assert_eq!(l.script.as_deref(), Some("main.py"));
        assert_eq!(l.args, ["--disable-dynamic-vram"]);
        assert_eq!(l.platform, None);
        let l = Launch::from_command_line(&s(&[" --lowvram --reserve-vram 2 "]));
        assert_eq!(l.args, ["--lowvram", "--reserve-vram", "2"]);
        let l = Launch::from_command_line(&s(&[
            r#".\python_embeded\python.exe -s ComfyUI\main.py --windows-standalone-build --output-directory "D:\my out""#,
        ]));
        assert_eq!(l.python.as_deref(), Some(r".\python_embeded\python.exe"));
        assert_eq!(
            l.args,
            [
                "--windows-standalone-build",
                "--output-directory",
                r"D:\my out"
            ]
        );
        assert_eq!(l.platform, Some(Platform::Windows));
        // One flag whose value holds a space, and separate arguments, stay as given.
        for args in [
            &["--output-directory=/srv/my models"][..],
            &["--lowvram", "--reserve-vram 2"][..],
        ] {
            assert_eq!(Launch::from_command_line(&s(args)).args, s(args));
        }
        // A flag and its value; a shell escape; a multi-line paste; PowerShell's `&`.
        let cases: &[(&str, &[&str])] = &[
            ("--reserve-vram 2", &["--reserve-vram", "2"]),
            (
                "python main.py --output-directory /srv/my\\ models --lowvram",
                &["--output-directory", "/srv/my models", "--lowvram"],
            ),
            (
                "python main.py \\\n  --lowvram \\\n  --reserve-vram 1\n",
                &["--lowvram", "--reserve-vram", "1"],
            ),
            (
                r#"& "C:\Py 3\python.exe" ComfyUI\main.py --lowvram"#,
                &["--lowvram"],
            ),
        ];
        for (line, want) in cases {
            assert_eq!(
                Launch::from_command_line(&s(&[line])).args,
                s(want),
                "{line:?}"
            );
        }
    }

    #[test]
    fn the_portable_build_s_flag_or_a_windows_python_implies_windows() {
        let l = Launch::from_command_line(&s(&["--windows-standalone-build", "--lowvram"]));
        assert_eq!(l.platform, Some(Platform::Windows));
        let l = Launch::from_command_line(&s(&["C:\\py\\PYTHON.EXE", "main.py"]));
        assert_eq!(l.platform, Some(Platform::Windows));
        let l = Launch::from_command_line(&s(&["python3", "main.py", "--lowvram"]));
        assert_eq!(l.platform, None);
    }

    #[test]
    fn portable_bat() {
        let text = "@echo off\r\n.\\python_embeded\\python.exe -s ComfyUI\\main.py --windows-standalone-build --enable-manager\r\necho If you see this and ComfyUI did not start try updating your Nvidia Drivers to the latest.\r\npause\r\n";
        let l = parse_bat(text, &[]).unwrap();
        assert_eq!(l.python.as_deref(), Some(".\\python_embeded\\python.exe"));
        assert_eq!(l.python_args, ["-s"]);
        assert_eq!(l.script.as_deref(), Some("ComfyUI\\main.py"));
        assert_eq!(l.args, ["--windows-standalone-build", "--enable-manager"]);
        assert_eq!(l.platform, Some(Platform::Windows));
        assert_eq!(l.line, Some(2));
    }

    #[test]
    fn bat_with_set_comments_continuations_and_passthrough() {
        let text = "REM my launcher\r\n:: another comment\r\nset CUDA_VISIBLE_DEVICES=1\r\nset \"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\"\r\nset FLAGS=--highvram\r\n.\\python_embeded\\python.exe -s ComfyUI\\main.py ^\r\n  --windows-standalone-build %FLAGS% ^\r\n  --reserve-vram 1 %*\r\npause\r\n";
        let l = parse_bat(text, &s(&["--lowvram"])).unwrap();
        assert_eq!(
            l.args,
            [
                "--windows-standalone-build",
                "--highvram",
                "--reserve-vram",
                "1",
                "--lowvram"
            ]
        );
        assert!(l.passthrough);
        assert_eq!(l.line, Some(6));
        assert_eq!(
            l.relevant_env(),
            vec![
                ("CUDA_VISIBLE_DEVICES".to_string(), "1".to_string()),
                (
                    "PYTORCH_CUDA_ALLOC_CONF".into(),
                    "expandable_segments:True".into()
                )
            ]
        );
    }

    #[test]
    fn bat_quoted_paths_and_rem_lines_with_main_py() {
        let text = "rem python main.py --cpu\n\"C:\\Program Files\\Python\\python.exe\" \"D:\\AI\\Comfy UI\\main.py\" --lowvram\n";
        let l = parse_bat(text, &[]).unwrap();
        assert_eq!(
            l.python.as_deref(),
            Some("C:\\Program Files\\Python\\python.exe")
        );
        assert_eq!(l.script.as_deref(), Some("D:\\AI\\Comfy UI\\main.py"));
        assert_eq!(l.args, ["--lowvram"]);
    }

    #[test]
    fn bat_without_main_py() {
        assert!(parse_bat("@echo off\r\necho hello\r\npause\r\n", &[]).is_none());
    }

    #[test]
    fn sh_launcher() {
        let text = "#!/usr/bin/env bash\n# start ComfyUI\nset -e\ncd \"$(dirname \"$0\")\"\nsource venv/bin/activate\nexport PYTORCH_CUDA_ALLOC_CONF='backend:native'\nCUDA_VISIBLE_DEVICES=0 exec python main.py \\\n  --listen 0.0.0.0 \\\n  --disable-dynamic-vram \"$@\" # comment\n";
        let l = parse_sh(text, &s(&["--cache-none"])).unwrap();
        assert_eq!(l.python.as_deref(), Some("python"));
        assert_eq!(
            l.args,
            [
                "--listen",
                "0.0.0.0",
                "--disable-dynamic-vram",
                "--cache-none"
            ]
        );
        assert!(l.passthrough);
        assert_eq!(
            l.relevant_env(),
            vec![
                (
                    "PYTORCH_CUDA_ALLOC_CONF".to_string(),
                    "backend:native".to_string()
                ),
                ("CUDA_VISIBLE_DEVICES".into(), "0".into())
            ]
        );
        assert_eq!(l.line, Some(7));
    }

    #[test]
    fn sh_variables_expand() {
        let text = "ARGS=\"--highvram\"\npython3 ./main.py $ARGS --reserve-vram=${RESERVE:-2}\n";
        let l = parse_sh(text, &[]).unwrap();
        assert_eq!(l.args[0], "--highvram");
        assert!(l.args[1].starts_with("--reserve-vram="));
    }

    #[test]
    fn command_line_forms() {
        let l = Launch::from_command_line(&s(&["--highvram", "--lowvram"]));
        assert_eq!(l.args, ["--highvram", "--lowvram"]);
        assert!(l.script.is_none());
        let l = Launch::from_command_line(&s(&[
            "CUDA_VISIBLE_DEVICES=1",
            "python",
            "-s",
            "main.py",
            "--cpu",
        ]));
        assert_eq!(l.args, ["--cpu"]);
        assert_eq!(l.python.as_deref(), Some("python"));
        assert_eq!(l.python_args, ["-s"]);
        assert_eq!(
            l.env,
            vec![("CUDA_VISIBLE_DEVICES".to_string(), "1".to_string())]
        );
    }

    #[test]
    fn desktop_launch_args_are_read_like_a_launcher() {
        // As ComfyUI Desktop writes them: names without dashes, "" for a switch.
        let text = r#"{
            "Comfy.ColorPalette": "dark",
            "Comfy.Server.LaunchArgs": {
                "disable-dynamic-vram": "",
                "reserve-vram": "1.5",
                "--cache-lru": "10"
            },
            "Comfy-Desktop.AutoUpdate": true
        }"#;
        let l = parse_desktop_settings(text, &["--highvram".to_string()]).unwrap();
        assert_eq!(
            l.args,
            // In name order (argparse does not mind the order of distinct flags).
            [
                "--cache-lru",
                "10",
                "--disable-dynamic-vram",
                "--reserve-vram",
                "1.5",
                "--highvram"
            ]
        );
        assert_eq!(l.python, None);
        // No launch arguments set: Desktop's defaults.
        assert!(parse_desktop_settings("{}", &[]).unwrap().args.is_empty());
        assert!(parse_desktop_settings("[1]", &[]).is_err());
        assert!(
            parse_desktop_settings(r#"{"Comfy.Server.LaunchArgs": "--lowvram"}"#, &[])
                .unwrap_err()
                .contains("not an object")
        );
    }

    #[test]
    fn a_desktop_settings_file_is_read_by_its_extension() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("comfy.settings.json");
        std::fs::write(
            &path,
            "\u{feff}{\"Comfy.Server.LaunchArgs\": {\"lowvram\": \"\"}}",
        )
        .unwrap();
        assert_eq!(read_file(&path, &[]).unwrap().args, ["--lowvram"]);
        std::fs::write(&path, "{oops").unwrap();
        let err = read_file(&path, &[]).unwrap_err().to_string();
        assert!(err.contains("not a JSON settings file"), "{err}");
    }
}
