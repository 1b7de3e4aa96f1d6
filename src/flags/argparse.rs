//! How ComfyUI's argparse reads a command line, reproduced so `explain` can predict it.
//!
//! ComfyUI calls `parse_args()` on a default `ArgumentParser` (`comfy/cli_args.py`), so:
//! - an unambiguous prefix of a long option is that option (`--disable-dyn`);
//! - an ambiguous prefix aborts with `ambiguous option: X could match A, B`;
//! - two members of a mutually exclusive group abort with
//!   `argument --lowvram: not allowed with argument --highvram` (later flag first);
//! - a value argparse cannot convert aborts with `invalid float value: 'abc'`;
//! - unknown options (and values nobody consumes) abort with `unrecognized arguments: …`.
//!
//! argparse stops at the first error; [`parse`] keeps going so `explain` can list every
//! problem, and reports in [`Parsed::error`] the one line ComfyUI would actually print.

use super::defs::{self, ValueKind};
use super::help::{FlagSet, Nargs, OptSpec};
use crate::version::Version;
use serde::Serialize;

/// One option as ComfyUI will see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Given {
    /// What was typed (`--disable-dyn`, `--reserve-vram=2`).
    pub typed: String,
    /// The option it resolves to (`--disable-dynamic-vram`).
    pub flag: String,
    /// The values it consumed.
    pub values: Vec<String>,
    /// The arguments it took, as positions in the command line read.
    #[serde(skip)]
    pub args: std::ops::Range<usize>,
}

impl Given {
    /// Whether the user typed an abbreviation.
    pub fn abbreviated(&self) -> bool {
        let typed = self.typed.split('=').next().unwrap_or("");
        typed != self.flag
    }
}

/// Two flags of one mutually exclusive group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// The flag given first.
    pub first: String,
    /// The later flag, which argparse names in its error.
    pub second: String,
    /// argparse's message (`argument --lowvram: not allowed with argument --highvram`).
    pub message: String,
}

/// A prefix that matches several options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ambiguous {
    pub typed: String,
    pub candidates: Vec<String>,
}

/// A value argparse would refuse (bad type, bad choice, missing, too many).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadValue {
    pub flag: String,
    pub message: String,
}

/// The result of reading a command line the way ComfyUI does.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Parsed {
    /// Recognised options, in order.
    pub given: Vec<Given>,
    /// Unrecognised arguments, in order (unknown options and stray values).
    pub unknown: Vec<String>,
    pub ambiguous: Vec<Ambiguous>,
    pub conflicts: Vec<Conflict>,
    pub bad_values: Vec<BadValue>,
    /// `--help` was given: ComfyUI prints help and exits 0.
    pub help_requested: bool,
    /// The error line ComfyUI prints before exiting 2, without the `main.py: error: ` prefix.
    pub error: Option<String>,
    /// That error is argparse's last check alone: arguments nobody consumed
    /// (`unrecognized arguments: …`), nothing else wrong before it.
    #[serde(skip)]
    pub only_unrecognized: bool,
}

impl Parsed {
    /// Whether `flag` (a full name) is in effect.
    pub fn has(&self, flag: &str) -> bool {
        self.given.iter().any(|g| g.flag == flag)
    }

    /// The last occurrence of `flag` (argparse keeps the last value).
    pub fn last(&self, flag: &str) -> Option<&Given> {
        self.given.iter().rev().find(|g| g.flag == flag)
    }

    /// Whether ComfyUI starts with these flags (exit 2 otherwise).
    pub fn accepted(&self) -> bool {
        self.error.is_none()
    }
}

/// How argparse classifies one argument.
enum Class<'a> {
    /// An option string resolving to `spec`, with an `=value` if there was one.
    Opt(&'a OptSpec, Option<String>),
    /// Looks like an option but matches none.
    Unknown,
    /// Matches several options.
    Ambiguous(Vec<String>),
    /// A value.
    Arg,
}

/// Reads `args` against `set`. `version` picks the value types of the flag model.
pub fn parse(set: &FlagSet, args: &[impl AsRef<str>], version: Option<&Version>) -> Parsed {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let mut out = Parsed::default();
    let mut after_dashdash = false;
    let classes: Vec<Class> = args
        .iter()
        .map(|a| {
            if after_dashdash {
                return Class::Arg;
            }
            if *a == "--" {
                after_dashdash = true;
                return Class::Arg;
            }
            classify(set, a)
        })
        .collect();

    // argparse raises on an ambiguous prefix while classifying, before anything else.
    for (arg, class) in args.iter().zip(&classes) {
        if let Class::Ambiguous(candidates) = class {
            if out.error.is_none() {
                out.error = Some(format!(
                    "ambiguous option: {arg} could match {}",
                    candidates.join(", ")
                ));
            }
            out.ambiguous.push(Ambiguous {
                typed: arg.to_string(),
                candidates: candidates.clone(),
            });
        }
    }

    let mut errors_in_order: Vec<String> = Vec::new();
    let mut errors_before_help = 0usize;
    let mut i = 0;
    while i < args.len() {
        match &classes[i] {
            Class::Opt(spec, explicit) => {
                let start = i;
                let typed = args[i].to_string();
                let flag = spec.name().to_string();
                let mut values = Vec::new();
                let kind = defs::lookup(&flag).map(|d| d.value_in(version));
                if let Some(value) = explicit {
                    if spec.nargs == Nargs::Zero {
                        errors_in_order.push(format!(
                            "argument {}: ignored explicit argument {}",
                            arg_name(spec),
                            py_repr(value)
                        ));
                    }
                    values.push(value.clone());
                    i += 1;
                } else {
                    i += 1;
                    let (taken, error) = take_values(spec, &args[i..], &classes[i..]);
                    errors_in_order.extend(error);
                    i += taken.len();
                    values.extend(taken);
                }
                if flag == "--help" && !out.help_requested {
                    out.help_requested = true;
                    errors_before_help = errors_in_order.len();
                }
                if let Some(message) = check_values(spec, kind, &values) {
                    errors_in_order.push(message.clone());
                    out.bad_values.push(BadValue {
                        flag: flag.clone(),
                        message,
                    });
                }
                // Conflicts are checked as each option is taken, against those already seen.
                if let Some(message) = conflict(set, spec, &flag, &mut out) {
                    errors_in_order.push(message);
                }
                out.given.push(Given {
                    typed,
                    flag,
                    values,
                    args: start..i,
                });
            }
            Class::Unknown | Class::Ambiguous(_) => {
                if matches!(classes[i], Class::Unknown) {
                    out.unknown.push(args[i].to_string());
                }
                i += 1;
            }
            Class::Arg => {
                if args[i] != "--" {
                    out.unknown.push(args[i].to_string());
                }
                i += 1;
            }
        }
    }

    if out.error.is_none() && out.help_requested && errors_before_help == 0 {
        // `--help` exits 0 as soon as argparse reaches it; errors before it still win.
        return out;
    }
    if out.error.is_none() {
        out.error = errors_in_order.into_iter().next();
    }
    if out.error.is_none() && !out.unknown.is_empty() {
        out.error = Some(format!("unrecognized arguments: {}", out.unknown.join(" ")));
        out.only_unrecognized = true;
    }
    out
}

/// The values an option takes from the arguments after it (those that are not options
/// themselves, as its `nargs` allows), and argparse's error when too few are there.
fn take_values(spec: &OptSpec, args: &[&str], classes: &[Class]) -> (Vec<String>, Option<String>) {
    let available = if args.first() == Some(&"--") {
        0
    } else {
        classes
            .iter()
            .take_while(|c| matches!(c, Class::Arg))
            .count()
    };
    let take = match spec.nargs {
        Nargs::Zero => 0,
        Nargs::One | Nargs::Optional => 1.min(available),
        Nargs::Exactly(n) => n.min(available),
        Nargs::ZeroOrMore | Nargs::OneOrMore => available,
    };
    let needed = match spec.nargs {
        Nargs::One | Nargs::OneOrMore => 1,
        Nargs::Exactly(n) => n,
        _ => 0,
    };
    let error = (take < needed).then(|| {
        let what = match spec.nargs {
            Nargs::OneOrMore => "expected at least one argument".to_string(),
            Nargs::Exactly(n) if n > 1 => format!("expected {n} arguments"),
            _ => "expected one argument".to_string(),
        };
        format!("argument {}: {what}", arg_name(spec))
    });
    let values = args[..take].iter().map(|s| s.to_string()).collect();
    (values, error)
}

/// argparse's mutually exclusive groups: `flag` against the options already given; the
/// conflict is recorded once, and its message returned.
fn conflict(set: &FlagSet, spec: &OptSpec, flag: &str, out: &mut Parsed) -> Option<String> {
    let group = set.group_of(flag)?;
    let earlier = out
        .given
        .iter()
        .find(|g| g.flag != flag && group.contains(&g.flag))?;
    let message = format!(
        "argument {}: not allowed with argument {}",
        arg_name(spec),
        earlier.flag
    );
    if !out
        .conflicts
        .iter()
        .any(|c| c.first == earlier.flag && c.second == flag)
    {
        out.conflicts.push(Conflict {
            first: earlier.flag.clone(),
            second: flag.to_string(),
            message: message.clone(),
        });
    }
    Some(message)
}

/// argparse's `_parse_optional`: exact match, `--x=value`, then unique prefix.
fn classify<'a>(set: &'a FlagSet, arg: &str) -> Class<'a> {
    if !arg.starts_with('-') || arg == "-" {
        return Class::Arg;
    }
    if let Some(spec) = set.get(arg) {
        return Class::Opt(spec, None);
    }
    let (name, explicit) = match arg.split_once('=') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (arg, None),
    };
    if let Some(spec) = set.get(name) {
        return Class::Opt(spec, explicit);
    }
    if name.starts_with("--") {
        let matches: Vec<(&OptSpec, &String)> = set
            .options
            .iter()
            .flat_map(|o| o.names.iter().map(move |n| (o, n)))
            .filter(|(_, n)| n.starts_with(name))
            .collect();
        match matches.len() {
            0 => {}
            1 => return Class::Opt(matches[0].0, explicit),
            _ => return Class::Ambiguous(matches.iter().map(|(_, n)| n.to_string()).collect()),
        }
    }
    // A negative number is a value when no option looks like one (ComfyUI has none).
    if arg[1..].parse::<f64>().is_ok() {
        return Class::Arg;
    }
    if arg.contains(' ') {
        return Class::Arg;
    }
    Class::Unknown
}

/// Type and choice checks in argparse's words.
fn check_values(spec: &OptSpec, kind: Option<ValueKind>, values: &[String]) -> Option<String> {
    let name = arg_name(spec);
    for value in values {
        if let Some(kind) = kind {
            let ok = match kind {
                ValueKind::Float { .. } | ValueKind::Floats { .. } => py_float(value),
                ValueKind::Int | ValueKind::OptionalInt { .. } => py_int(value),
                ValueKind::Enum { values, .. } => values.contains(&value.as_str()),
                ValueKind::Switch | ValueKind::Str => true,
            };
            if !ok {
                let type_name = kind.type_name().unwrap_or("value");
                return Some(format!(
                    "argument {name}: invalid {type_name} value: {}",
                    py_repr(value)
                ));
            }
        }
        if let Some(choices) = &spec.choices
            && !choices.contains(value)
        {
            let list: Vec<String> = choices.iter().map(|c| py_repr(c)).collect();
            return Some(format!(
                "argument {name}: invalid choice: {} (choose from {})",
                py_repr(value),
                list.join(", ")
            ));
        }
    }
    if let Some(ValueKind::Floats { max, .. }) = kind
        && values.len() > max
        && spec.name() == "--cache-ram"
    {
        // ComfyUI's own check after parsing (`comfy/cli_args.py`).
        return Some("--cache-ram accepts at most two values: active GB and inactive GB".into());
    }
    None
}

/// How argparse names an option in errors: all its strings joined by `/`.
fn arg_name(spec: &OptSpec) -> String {
    spec.names.join("/")
}

/// Python's `float()` on a string.
fn py_float(s: &str) -> bool {
    let t = s.trim().to_ascii_lowercase().replace('_', "");
    let t = t.trim_start_matches(['+', '-']);
    matches!(t, "inf" | "infinity" | "nan") || (!t.is_empty() && t.parse::<f64>().is_ok())
}

/// Python's `int()` on a string.
fn py_int(s: &str) -> bool {
    let t = s.trim().replace('_', "");
    let t = t.strip_prefix(['+', '-']).unwrap_or(&t);
    !t.is_empty() && t.chars().all(|c| c.is_ascii_digit())
}

/// Python's `repr()` of a str, as argparse prints it.
pub fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::profile;

    fn new(args: &[&str]) -> Parsed {
        parse(&profile::builtin(None).flags, args, None)
    }

    fn old(args: &[&str]) -> Parsed {
        let v = Version::lit("0.3.64");
        parse(&profile::builtin(Some(&v)).flags, args, Some(&v))
    }

    type Case<'a> = (fn(&[&str]) -> Parsed, &'a [&'a str], Option<&'a str>);

    #[test]
    fn table() {
        // (profile, args, the error ComfyUI prints or None)
        let cases: &[Case] = &[
            (new, &[], None),
            (new, &["--highvram"], None),
            (
                old,
                &["--highvram", "--lowvram"],
                Some("argument --lowvram: not allowed with argument --highvram"),
            ),
            (
                old,
                &["--cpu", "--highvram", "--lowvram"],
                Some("argument --highvram: not allowed with argument --cpu"),
            ),
            (
                new,
                &["--cpu", "--highvram"],
                Some("argument --highvram: not allowed with argument --cpu"),
            ),
            (
                old,
                &["--no-such-flag"],
                Some("unrecognized arguments: --no-such-flag"),
            ),
            (
                old,
                &["--vram-headroom", "2"],
                Some("unrecognized arguments: --vram-headroom 2"),
            ),
            (
                old,
                &["--disable-dynamic-vram"],
                Some("unrecognized arguments: --disable-dynamic-vram"),
            ),
            (
                old,
                &["--cache-ram", "16"],
                Some("unrecognized arguments: --cache-ram 16"),
            ),
            (
                new,
                &["--reserve-vram", "abc"],
                Some("argument --reserve-vram: invalid float value: 'abc'"),
            ),
            (
                new,
                &["--reserve-vram"],
                Some("argument --reserve-vram: expected one argument"),
            ),
            (
                new,
                &["--reserve-vram", "--highvram"],
                Some("argument --reserve-vram: expected one argument"),
            ),
            (
                new,
                &["--fast", "dynamic_vram"],
                Some("argument --fast: invalid PerformanceFeature value: 'dynamic_vram'"),
            ),
            (
                new,
                &["--cache-ram", "1", "2", "3"],
                Some("--cache-ram accepts at most two values: active GB and inactive GB"),
            ),
            (new, &["--reserve-vram=2"], None),
            (
                new,
                &["--highvram=yes"],
                Some("argument --highvram: ignored explicit argument 'yes'"),
            ),
            (new, &["--async-offload"], None),
            (new, &["--async-offload", "4"], None),
            (
                new,
                &["--async-offload", "x"],
                Some("argument --async-offload: invalid int value: 'x'"),
            ),
            (
                old,
                &["--async-offload", "4"],
                Some("unrecognized arguments: 4"),
            ),
            (new, &["--reserve-vram", "-1"], None),
        ];
        for (profile, args, expected) in cases {
            let p = profile(args);
            assert_eq!(p.error.as_deref(), *expected, "{args:?}");
            // Tested here on the message only: the flag says the same without reading it.
            let unrecognized = expected.is_some_and(|e| e.starts_with("unrecognized arguments"));
            assert_eq!(p.only_unrecognized, unrecognized, "{args:?}");
        }
    }

    #[test]
    fn unambiguous_prefix_is_accepted() {
        let p = new(&["--disable-dyn"]);
        assert!(p.accepted());
        assert_eq!(p.given[0].flag, "--disable-dynamic-vram");
        assert!(p.given[0].abbreviated());
        let p = new(&["--reserve=1.5"]);
        assert_eq!(p.given[0].flag, "--reserve-vram");
        assert_eq!(p.given[0].values, ["1.5"]);
    }

    #[test]
    fn ambiguous_prefix_is_refused() {
        let p = new(&["--highvram", "--disable-cuda"]);
        let err = p.error.unwrap();
        assert!(
            err.starts_with("ambiguous option: --disable-cuda could match "),
            "{err}"
        );
        assert!(err.contains("--disable-cuda-malloc") && err.contains("--disable-cuda-graphs"));
        assert_eq!(p.ambiguous.len(), 1);
    }

    #[test]
    fn ambiguity_beats_an_earlier_conflict() {
        let p = new(&["--cpu", "--highvram", "--disable-cuda"]);
        assert!(p.error.unwrap().starts_with("ambiguous option"));
        assert_eq!(p.conflicts.len(), 1, "still listed");
    }

    #[test]
    fn every_conflict_is_listed_but_the_first_is_reported() {
        let p = new(&["--highvram", "--lowvram", "--cache-none", "--cache-classic"]);
        assert_eq!(p.conflicts.len(), 2);
        assert_eq!(
            p.error.as_deref(),
            Some("argument --lowvram: not allowed with argument --highvram")
        );
    }

    #[test]
    fn conflicts_beat_unknown_flags() {
        let p = new(&["--bogus", "--highvram", "--lowvram"]);
        assert!(p.error.unwrap().contains("not allowed"));
        assert_eq!(p.unknown, ["--bogus"]);
    }

    #[test]
    fn repeating_a_flag_is_no_conflict() {
        assert!(new(&["--highvram", "--highvram"]).accepted());
    }

    #[test]
    fn help_exits_early() {
        let p = new(&["--help", "--bogus"]);
        assert!(p.help_requested);
        assert!(p.error.is_none());
        // An error argparse meets before --help still wins.
        let p = new(&["--reserve-vram", "abc", "--help"]);
        assert_eq!(
            p.error.as_deref(),
            Some("argument --reserve-vram: invalid float value: 'abc'")
        );
    }

    #[test]
    fn values_after_double_dash_are_unrecognized() {
        let p = new(&["--highvram", "--", "--lowvram"]);
        assert_eq!(p.unknown, ["--lowvram"]);
    }

    #[test]
    fn py_repr_quotes_like_python() {
        assert_eq!(py_repr("abc"), "'abc'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a\\b"), "'a\\\\b'");
    }
}
