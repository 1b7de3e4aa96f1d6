//! Learning an install's flags from the text of `python main.py --help`.
//!
//! ComfyUI's flags change every two weeks, so the tool never trusts a built-in list when it
//! can ask the install. argparse's help has two parts that matter: the usage block, which
//! shows mutually exclusive groups as `[--a | --b | --c]`, and the option list, which shows
//! each option's strings and how many values it takes (`--x X`, `--x [X]`, `--x [X ...]`).

use serde::Serialize;

/// How many values an option consumes, in argparse's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Nargs {
    /// A switch (`store_true`): no value.
    Zero,
    /// Exactly one value (`--port PORT`).
    One,
    /// Exactly this many values (`--x A B`).
    Exactly(usize),
    /// An optional value (`nargs='?'`: `--async-offload [NUM_STREAMS]`).
    Optional,
    /// Any number of values (`nargs='*'`: `--cache-ram [GB ...]`).
    ZeroOrMore,
    /// At least one value (`nargs='+'`: `--whitelist-custom-nodes X [X ...]`).
    OneOrMore,
}

/// One option as the help text shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OptSpec {
    /// Every option string, e.g. `["-h", "--help"]`; the last is the canonical long name.
    pub names: Vec<String>,
    pub nargs: Nargs,
    /// The metavar as printed (`PORT`, `[NUM_STREAMS]`), empty for switches.
    pub metavar: String,
    /// Allowed values when the help lists them (`{md5,sha1}` or an enum's `[none,auto]`).
    pub choices: Option<Vec<String>>,
    /// The help sentence, unwrapped.
    pub help: String,
}

impl OptSpec {
    /// The long name (`--help` for `-h, --help`).
    pub fn name(&self) -> &str {
        self.names
            .iter()
            .find(|n| n.starts_with("--"))
            .or(self.names.last())
            .map(String::as_str)
            .unwrap_or("")
    }
}

/// The flags one ComfyUI install accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlagSet {
    /// Options in the order the parser defines them (argparse reports prefix matches in this order).
    pub options: Vec<OptSpec>,
    /// Mutually exclusive groups, each a list of long names in definition order.
    pub groups: Vec<Vec<String>>,
}

impl FlagSet {
    /// The option with exactly this option string.
    pub fn get(&self, name: &str) -> Option<&OptSpec> {
        self.options
            .iter()
            .find(|o| o.names.iter().any(|n| n == name))
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The groups `name` belongs to.
    pub fn group_of(&self, name: &str) -> Option<&[String]> {
        self.groups
            .iter()
            .find(|g| g.iter().any(|n| n == name))
            .map(Vec::as_slice)
    }
}

/// Why a help text could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelpError(pub String);

/// Parses argparse's `--help` output.
pub fn parse(text: &str) -> Result<FlagSet, HelpError> {
    let text = text.replace("\r\n", "\n");
    let usage = usage_block(&text)
        .ok_or_else(|| HelpError("no 'usage:' line: this is not argparse help".into()))?;
    let groups = groups_in_usage(&usage);
    let options = option_entries(&text);
    if options.is_empty() {
        return Err(HelpError("no options listed after the usage block".into()));
    }
    Ok(FlagSet { options, groups })
}

/// The usage block joined into one line.
fn usage_block(text: &str) -> Option<String> {
    let start = text.find("usage:")?;
    let block = &text[start + "usage:".len()..];
    let end = block.find("\n\n").unwrap_or(block.len());
    Some(
        block[..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Splits the usage line into top-level bracketed parts and keeps those with `|`.
fn groups_in_usage(usage: &str) -> Vec<Vec<String>> {
    let mut groups = Vec::new();
    let mut depth = 0usize;
    let mut start = 0usize;
    for (i, c) in usage.char_indices() {
        match c {
            '[' | '(' => {
                if depth == 0 {
                    start = i + 1;
                }
                depth += 1;
            }
            ']' | ')' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    let inner = &usage[start..i];
                    let members = split_top_level(inner, " | ");
                    if members.len() > 1 {
                        groups.push(
                            members
                                .iter()
                                .filter_map(|m| m.split_whitespace().next())
                                .map(str::to_string)
                                .collect(),
                        );
                    }
                }
            }
            _ => {}
        }
    }
    groups
}

/// Splits on `sep` only outside brackets and braces.
fn split_top_level<'a>(s: &'a str, sep: &str) -> Vec<&'a str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut last = 0;
    let mut skip_to = 0;
    for (i, c) in s.char_indices() {
        if i < skip_to {
            continue;
        }
        match c {
            '[' | '{' | '(' => depth += 1,
            ']' | '}' | ')' => depth -= 1,
            _ => {}
        }
        if depth == 0 && s[i..].starts_with(sep) {
            parts.push(&s[last..i]);
            last = i + sep.len();
            skip_to = last;
        }
    }
    parts.push(&s[last..]);
    parts
}

/// Reads every `  --flag METAVAR   help…` entry after the usage block.
fn option_entries(text: &str) -> Vec<OptSpec> {
    let body = match text.find("usage:") {
        Some(start) => {
            let rest = &text[start..];
            &rest[rest.find("\n\n").unwrap_or(rest.len())..]
        }
        None => text,
    };
    let mut options: Vec<OptSpec> = Vec::new();
    for line in body.lines() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim_start();
        if (2..=4).contains(&indent) && trimmed.starts_with('-') {
            let (invocation, help) = match trimmed.find("  ") {
                Some(gap) => (&trimmed[..gap], trimmed[gap..].trim()),
                None => (trimmed, ""),
            };
            if let Some(mut spec) = parse_invocation(invocation) {
                spec.help = help.to_string();
                options.push(spec);
            }
        } else if indent > 4
            && let Some(last) = options.last_mut()
        {
            // A continuation of the previous entry's help text.
            if !last.help.is_empty() {
                last.help.push(' ');
            }
            last.help.push_str(trimmed);
        } else if indent == 0 && !trimmed.is_empty() {
            // A section title ("options:", a group title): nothing to keep.
        }
    }
    options
}

/// Parses `-h, --help` or `--cache-ram [GB ...]` into names, nargs and choices.
fn parse_invocation(invocation: &str) -> Option<OptSpec> {
    let mut names = Vec::new();
    let mut metavar = String::new();
    for part in split_top_level(invocation, ", ") {
        let part = part.trim();
        let (name, rest) = match part.find(' ') {
            Some(sp) => (&part[..sp], part[sp + 1..].trim()),
            None => (part, ""),
        };
        if !name.starts_with('-') {
            return None;
        }
        names.push(name.to_string());
        if !rest.is_empty() {
            metavar = rest.to_string();
        }
    }
    let (nargs, choices) = nargs_of(&metavar);
    Some(OptSpec {
        names,
        nargs,
        metavar,
        choices,
        help: String::new(),
    })
}

/// Derives argparse's nargs from how the metavar is printed.
fn nargs_of(metavar: &str) -> (Nargs, Option<Vec<String>>) {
    let m = metavar.trim();
    if m.is_empty() {
        return (Nargs::Zero, None);
    }
    let ellipsis = m.ends_with("...]") || m.ends_with("...]]");
    if ellipsis {
        let first = m.split_whitespace().next().unwrap_or("");
        let nargs = if m.starts_with('[') {
            Nargs::ZeroOrMore
        } else {
            Nargs::OneOrMore
        };
        return (nargs, choices_in(first.trim_start_matches('[')));
    }
    if let Some(inner) = m.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
        // `[{a,b}]` or `[NAME]` is an optional value; `[a,b,c]` (commas, no braces, no
        // spaces) is the literal metavar of ComfyUI's enum actions and takes one value.
        if !inner.starts_with('{') && inner.contains(',') && !inner.contains(' ') {
            return (
                Nargs::One,
                Some(inner.split(',').map(str::to_string).collect()),
            );
        }
        return (Nargs::Optional, choices_in(inner));
    }
    let words = split_top_level(m, " ");
    match words.len() {
        1 => (Nargs::One, choices_in(m)),
        n => (Nargs::Exactly(n), None),
    }
}

fn choices_in(token: &str) -> Option<Vec<String>> {
    let inner = token.strip_prefix('{')?.strip_suffix('}')?;
    Some(inner.split(',').map(str::to_string).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELP_0_3_64: &str = include_str!("../../fixtures/help/v0.3.64.txt");

    fn real() -> FlagSet {
        parse(HELP_0_3_64).expect("0.3.64 help parses")
    }

    #[test]
    fn real_help_lists_every_option_in_order() {
        let set = real();
        assert_eq!(set.options[0].names, ["-h", "--help"]);
        assert_eq!(set.options[1].name(), "--listen");
        assert_eq!(set.options.last().unwrap().name(), "--database-url");
        assert_eq!(set.options.len(), 85);
        assert!(set.has("--normalvram"));
        assert!(!set.has("--disable-dynamic-vram"));
    }

    #[test]
    fn real_help_nargs() {
        let set = real();
        let nargs = |n: &str| set.get(n).unwrap().nargs;
        assert_eq!(nargs("--listen"), Nargs::Optional);
        assert_eq!(nargs("--port"), Nargs::One);
        assert_eq!(nargs("--highvram"), Nargs::Zero);
        assert_eq!(nargs("--async-offload"), Nargs::Zero);
        assert_eq!(nargs("--fast"), Nargs::ZeroOrMore);
        assert_eq!(nargs("--extra-model-paths-config"), Nargs::OneOrMore);
        assert_eq!(nargs("--whitelist-custom-nodes"), Nargs::OneOrMore);
        assert_eq!(nargs("--verbose"), Nargs::Optional);
        assert_eq!(nargs("--preview-method"), Nargs::One);
        assert_eq!(nargs("--reserve-vram"), Nargs::One);
    }

    #[test]
    fn real_help_choices() {
        let set = real();
        let choices = |n: &str| set.get(n).unwrap().choices.clone().unwrap();
        assert_eq!(
            choices("--default-hashing-function"),
            ["md5", "sha1", "sha256", "sha512"]
        );
        assert_eq!(
            choices("--verbose"),
            ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
        );
        assert_eq!(
            choices("--preview-method"),
            ["none", "auto", "latent2rgb", "taesd"]
        );
        assert!(set.get("--port").unwrap().choices.is_none());
    }

    #[test]
    fn real_help_groups() {
        let set = real();
        assert!(set.groups.contains(&vec![
            "--gpu-only".to_string(),
            "--highvram".into(),
            "--normalvram".into(),
            "--lowvram".into(),
            "--novram".into(),
            "--cpu".into()
        ]));
        assert!(set.groups.contains(&vec![
            "--cache-classic".to_string(),
            "--cache-lru".into(),
            "--cache-none".into()
        ]));
        assert_eq!(
            set.group_of("--disable-cuda-malloc").unwrap(),
            ["--cuda-malloc", "--disable-cuda-malloc"]
        );
        assert_eq!(set.groups.len(), 9);
        assert!(set.group_of("--reserve-vram").is_none());
    }

    #[test]
    fn help_text_is_unwrapped() {
        let set = real();
        assert_eq!(
            set.get("--highvram").unwrap().help,
            "By default models will be unloaded to CPU memory after being used. This option keeps them in GPU memory."
        );
    }

    #[test]
    fn nargs_shapes() {
        assert_eq!(nargs_of("").0, Nargs::Zero);
        assert_eq!(nargs_of("PORT").0, Nargs::One);
        assert_eq!(nargs_of("[IP]").0, Nargs::Optional);
        assert_eq!(nargs_of("[GB ...]").0, Nargs::ZeroOrMore);
        assert_eq!(nargs_of("[LEVEL [FILE ...]]").0, Nargs::ZeroOrMore);
        assert_eq!(nargs_of("PATH [PATH ...]").0, Nargs::OneOrMore);
        assert_eq!(nargs_of("LEVEL FILE").0, Nargs::Exactly(2));
        assert_eq!(
            nargs_of("[{DEBUG,INFO}]"),
            (Nargs::Optional, Some(vec!["DEBUG".into(), "INFO".into()]))
        );
    }

    #[test]
    fn windows_line_endings_and_wider_terminals() {
        let wide = "usage: main.py [-h] [--a | --b] [--c C]\r\n\r\noptions:\r\n  -h, --help  show help\r\n  --a         A.\r\n  --b         B.\r\n  --c C       C.\r\n";
        let set = parse(wide).unwrap();
        assert_eq!(set.options.len(), 4);
        assert_eq!(set.groups, vec![vec!["--a".to_string(), "--b".into()]]);
    }

    #[test]
    fn text_beyond_ascii_is_split_on_character_boundaries() {
        // Found by the property tests: a byte-wise scan sliced inside a character.
        assert_eq!(split_top_level("𞸑a | b", " | "), ["𞸑a", "b"]);
        assert!(parse("usage: 𞸑 [--ü | --é]\n\noptions:\n  --ü  x\n").is_ok());
    }

    #[test]
    fn not_help_text() {
        assert!(parse("Traceback (most recent call last):\n").is_err());
        assert!(parse("usage: main.py\n\n").is_err());
    }
}
