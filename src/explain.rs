//! `vrambisect explain`: what a launch command really does to memory.

use crate::error::Result;
use crate::flags::argparse::{self, Ambiguous, BadValue};
use crate::flags::decide::{self, Context, Platform, Predicted};
use crate::flags::help::FlagSet;
use crate::flags::profile;
use crate::flags::{defs, hints};
use crate::install::Install;
use crate::launcher::{self, Launch, RELEVANT_ENV};
use crate::output::{Answer, Style};
use crate::version::Version;
use serde::Serialize;
use std::io::{self, Write};
use std::path::PathBuf;

/// What the user asked to explain: the command line's arguments as they are.
pub(crate) use crate::cli::ExplainArgs as Request;

/// Where the flag list came from.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FlagsSource {
    /// `install` (asked with `main.py --help`) or `builtin`.
    pub kind: &'static str,
    pub detail: String,
}

/// Two flags that may not be given together.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConflictOut {
    pub flags: [String; 2],
    pub group: String,
    pub message: String,
}

/// A flag this install does not know, and what to do about it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct UnknownFlag {
    pub flag: String,
    pub hint: String,
}

/// An environment variable ComfyUI reads.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct EnvVar {
    pub name: String,
    pub value: String,
    pub source: String,
}

/// The launcher that was read.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LauncherOut {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub python: Option<String>,
    pub script: Option<String>,
    pub passthrough: bool,
}

/// The whole answer of `explain`, as printed and as `--json`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Explanation {
    /// The ComfyUI folder and the Python whose flags were read, and where each came from
    /// (empty when the built-in flag list was used).
    pub defaults: crate::locate::Defaults,
    pub comfyui_version: Option<String>,
    pub flags_source: FlagsSource,
    pub platform: Platform,
    pub platform_source: String,
    pub launcher: Option<LauncherOut>,
    /// ComfyUI's arguments as they will reach it.
    pub argv: Vec<String>,
    /// Whether ComfyUI starts with these flags; `null` when that depends on flags that are
    /// not in the built-in list (read the install with `--comfyui` to know).
    pub accepted: Option<bool>,
    /// The line ComfyUI prints before exiting 2, when it refuses.
    pub startup_error: Option<String>,
    pub help_requested: bool,
    /// What ComfyUI will do with memory (Dynamic VRAM, VRAM state, reserve, pinned memory,
    /// async offload, allocator, cache, precisions, attention, no-op flags, advice), in the
    /// document's top level.
    #[serde(flatten)]
    pub predicted: Predicted,
    pub conflicts: Vec<ConflictOut>,
    pub unknown_flags: Vec<UnknownFlag>,
    pub ambiguous_flags: Vec<Ambiguous>,
    pub bad_values: Vec<BadValue>,
    pub environment: Vec<EnvVar>,
}

/// Reads the launcher and the install, then explains.
pub(crate) fn explain(req: &Request) -> Result<Explanation> {
    let launch = match &req.launcher {
        Some(path) => launcher::read_file(path, &req.args)?,
        None => Launch::from_command_line(&req.args),
    };
    let origin = crate::locate::Origin::current();
    let comfyui =
        crate::locate::comfyui_dir(req.comfyui.as_deref(), req.python.as_deref(), origin)?;
    let install = comfyui
        .as_ref()
        .map(|c| Install::open(&c.path))
        .transpose()?;
    let mut defaults = crate::locate::Defaults {
        comfyui,
        python: None,
    };
    let (flags, version, flags_source) = match &install {
        Some(install) => {
            let python = install.python(req.python.as_deref());
            defaults.python = Some(python.clone());
            let flags = install.flags(&python)?;
            let detail = format!(
                "{} main.py --help in {} ({})",
                python.path.display(),
                install.dir.display(),
                python.source
            );
            (
                flags,
                install.version.clone(),
                FlagsSource {
                    kind: "install",
                    detail,
                },
            )
        }
        None => {
            let p = profile::builtin(None);
            let detail = format!(
                "the built-in flag list of ComfyUI {}; pass --comfyui DIR to check your install",
                p.version
            );
            (
                p.flags,
                Some(p.version),
                FlagsSource {
                    kind: "builtin",
                    detail,
                },
            )
        }
    };
    let (platform, platform_source) = match (req.platform, launch.platform) {
        (Some(p), _) => (p, "--platform".to_string()),
        (None, Some(p)) if req.launcher.is_some() => {
            (p, "implied by the .bat launcher".to_string())
        }
        (None, Some(p)) => (
            p,
            "implied by the command line (a .exe Python or --windows-standalone-build)".to_string(),
        ),
        (None, None) => (Platform::host(), "this machine".to_string()),
    };
    let environment = environment(&launch, req, platform);
    let mut explanation = analyse(
        &flags,
        version,
        flags_source,
        platform,
        platform_source,
        &launch,
        req.launcher.clone(),
        environment,
    );
    explanation.defaults = defaults;
    Ok(explanation)
}

fn environment(launch: &Launch, req: &Request, platform: Platform) -> Vec<EnvVar> {
    let mut out: Vec<EnvVar> = launch
        .relevant_env()
        .into_iter()
        .map(|(name, value)| EnvVar {
            name,
            value,
            source: match (&req.launcher, launch.line) {
                (Some(path), _) => format!("set in {}", path.display()),
                (None, _) => "the command line".into(),
            },
        })
        .collect();
    // The current environment matters when ComfyUI would start from this shell.
    if req.launcher.is_none() && platform == Platform::host() {
        for name in RELEVANT_ENV {
            if out.iter().any(|e| e.name == *name) {
                continue;
            }
            if let Ok(value) = std::env::var(name) {
                out.push(EnvVar {
                    name: name.to_string(),
                    value,
                    source: "this shell's environment".into(),
                });
            }
        }
    }
    out
}

/// The pure part: flags in, explanation out.
#[allow(clippy::too_many_arguments)]
pub(crate) fn analyse(
    flags: &FlagSet,
    version: Option<Version>,
    flags_source: FlagsSource,
    platform: Platform,
    platform_source: String,
    launch: &Launch,
    launcher_path: Option<PathBuf>,
    environment: Vec<EnvVar>,
) -> Explanation {
    let parsed = argparse::parse(flags, &launch.args, version.as_ref());
    let ctx = Context {
        platform,
        version: version.clone(),
        total_vram_mb: None,
        env: environment
            .iter()
            .map(|e| (e.name.clone(), e.value.clone()))
            .collect(),
    };
    let effective = decide::decide(&parsed, &ctx);
    let conflicts = parsed
        .conflicts
        .iter()
        .map(|c| ConflictOut {
            flags: [c.first.clone(), c.second.clone()],
            group: defs::lookup(&c.second)
                .and_then(|d| d.group)
                .map(|g| g.label().to_string())
                .unwrap_or_else(|| "mutually exclusive group".into()),
            message: c.message.clone(),
        })
        .collect();
    // The built-in list is one version's: a flag missing from it may be in the user's install.
    let builtin = flags_source.kind == "builtin";
    let unknown_only = parsed.only_unrecognized;
    let unknown_flags = parsed
        .unknown
        .iter()
        .map(|flag| UnknownFlag {
            flag: flag.clone(),
            hint: if builtin {
                hints::builtin_unknown(flag, flags, version.as_ref())
            } else {
                hints::unknown(flag, flags, version.as_ref())
            },
        })
        .collect();
    let (accepted, startup_error) = if builtin && unknown_only {
        (None, None)
    } else {
        (
            Some(parsed.accepted()),
            parsed
                .error
                .as_ref()
                .map(|e| format!("main.py: error: {e}")),
        )
    };
    Explanation {
        defaults: Default::default(),
        comfyui_version: version.as_ref().map(ToString::to_string),
        flags_source,
        platform,
        platform_source,
        launcher: launcher_path.map(|path| LauncherOut {
            path,
            line: launch.line,
            python: launch.python.clone(),
            script: launch.script.clone(),
            passthrough: launch.passthrough,
        }),
        argv: launch.args.clone(),
        accepted,
        startup_error,
        help_requested: parsed.help_requested,
        conflicts,
        unknown_flags,
        ambiguous_flags: parsed.ambiguous.clone(),
        bad_values: parsed.bad_values.clone(),
        predicted: effective,
        environment,
    }
}

impl Answer for Explanation {
    /// Prints the explanation for a person.
    fn render(&self, style: &Style, out: &mut dyn Write) -> io::Result<()> {
        render_inputs(self, style, out)?;
        render_prediction(self, style, out)?;
        render_findings(self, style, out)
    }
}

/// The version, where the flags came from, the launcher, the flags, the platform, and
/// whether ComfyUI starts with them.
fn render_inputs(e: &Explanation, style: &Style, out: &mut dyn Write) -> io::Result<()> {
    let version = e.comfyui_version.as_deref().unwrap_or("(version unknown)");
    writeln!(out, "{} {}", style.bold("ComfyUI"), style.bold(version))?;
    writeln!(
        out,
        "  {}",
        style.dim(&format!("flags from {}", e.flags_source.detail))
    )?;
    if let Some(l) = &e.launcher {
        let line = l.line.map(|n| format!(" line {n}")).unwrap_or_default();
        writeln!(out, "  launcher {}{line}", l.path.display())?;
    }
    let argv = if e.argv.is_empty() {
        "(no flags)".to_string()
    } else {
        e.argv.join(" ")
    };
    writeln!(out, "  flags    {argv}")?;
    writeln!(
        out,
        "  platform {} ({})",
        e.platform.name(),
        e.platform_source
    )?;
    writeln!(out)?;

    if let Some(err) = &e.startup_error {
        writeln!(
            out,
            "{} ComfyUI will refuse to start (exit 2):",
            style.bad("✗")
        )?;
        writeln!(out, "    {err}")?;
        writeln!(out)?;
        // The rest would read as if ComfyUI ran: it is what the flags would set.
        writeln!(
            out,
            "{}",
            style.dim("What the flags would set if ComfyUI accepted them:")
        )?;
    } else if e.accepted.is_none() {
        writeln!(
            out,
            "? Whether ComfyUI starts depends on flags that are not in vrambisect's list (see Unknown flags)"
        )?;
        writeln!(out)?;
    } else if e.help_requested {
        writeln!(out, "! ComfyUI will print its help and exit (--help)")?;
        writeln!(out)?;
    }

    Ok(())
}

/// What ComfyUI will do with memory, one row per decision.
fn render_prediction(e: &Explanation, style: &Style, out: &mut dyn Write) -> io::Result<()> {
    let dyn_word = if e.predicted.dynamic_vram.enabled {
        style.good("on")
    } else {
        style.warn("off")
    };
    let rows: Vec<(&str, String)> = vec![
        (
            "Dynamic VRAM",
            format!("{dyn_word}: {}", e.predicted.dynamic_vram.reason),
        ),
        ("VRAM state", e.predicted.vram_state.to_string()),
        (
            "Reserved VRAM",
            format!(
                "{} MiB ({})",
                e.predicted.reserved_vram_mb, e.predicted.reserved_vram_source
            ),
        ),
        ("Pinned memory", on_off(e.predicted.pinned_memory).into()),
        (
            "Async offload",
            e.predicted
                .async_offload_streams
                .map(|n| format!("{n} streams"))
                .unwrap_or_else(|| "off".into()),
        ),
        ("Allocator", e.predicted.allocator.to_string()),
        ("Cache", e.predicted.cache.replace('_', " ")),
    ];
    let mut rows = rows;
    if !e.predicted.precision.is_empty() {
        let text = e
            .predicted
            .precision
            .iter()
            .map(|p| format!("{} {} ({})", p.part, p.dtype, p.flag))
            .collect::<Vec<_>>()
            .join(", ");
        rows.push(("Precision", text));
    }
    if let Some(flag) = &e.predicted.attention {
        rows.push(("Attention", flag.clone()));
    }
    for (label, value) in rows {
        writeln!(out, "{:<14} {value}", style.bold(label))?;
    }
    if e.predicted.single_gpu_forced {
        writeln!(
            out,
            "{:<14} only GPU 0 (Windows single-GPU mode)",
            style.bold("GPUs")
        )?;
    }
    for env in &e.environment {
        writeln!(
            out,
            "{:<14} {}={} ({})",
            style.bold("Environment"),
            env.name,
            env.value,
            env.source
        )?;
    }

    Ok(())
}

/// The lists: no-op flags, conflicts, ambiguous abbreviations, unknown flags, bad values,
/// advice.
fn render_findings(e: &Explanation, style: &Style, out: &mut dyn Write) -> io::Result<()> {
    section(
        out,
        style,
        "No-op flags",
        e.predicted
            .no_op
            .iter()
            .map(|n| (n.flag.clone(), n.reason.clone())),
    )?;
    section(
        out,
        style,
        "Conflicts",
        e.conflicts.iter().map(|c| {
            (
                c.flags.join(" + "),
                format!("both in the {} group: only one may be given", c.group),
            )
        }),
    )?;
    section(
        out,
        style,
        "Ambiguous abbreviations",
        e.ambiguous_flags.iter().map(|a| {
            (
                a.typed.clone(),
                format!("could be {}", a.candidates.join(", ")),
            )
        }),
    )?;
    section(
        out,
        style,
        "Unknown flags",
        e.unknown_flags
            .iter()
            .map(|u| (u.flag.clone(), u.hint.clone())),
    )?;
    section(
        out,
        style,
        "Bad values",
        e.bad_values
            .iter()
            .map(|b| (b.flag.clone(), b.message.clone())),
    )?;
    section(
        out,
        style,
        "Advice",
        e.predicted.advice.iter().map(|a| {
            (
                a.flag.clone().unwrap_or_else(|| "note".into()),
                a.text.clone(),
            )
        }),
    )?;
    Ok(())
}

fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

fn section(
    out: &mut dyn Write,
    style: &Style,
    title: &str,
    rows: impl Iterator<Item = (String, String)>,
) -> io::Result<()> {
    let rows: Vec<_> = rows.collect();
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "{}", style.bold(title))?;
    for (key, text) in rows {
        writeln!(out, "  {}  {text}", style.warn(&key))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin(args: &[&str], platform: Platform) -> Explanation {
        let p = profile::builtin(None);
        let launch =
            Launch::from_command_line(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        analyse(
            &p.flags,
            Some(p.version),
            FlagsSource {
                kind: "builtin",
                detail: String::new(),
            },
            platform,
            String::new(),
            &launch,
            None,
            Vec::new(),
        )
    }

    fn old(args: &[&str]) -> Explanation {
        let v = Version::lit("0.3.64");
        let p = profile::builtin(Some(&v));
        let launch =
            Launch::from_command_line(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        analyse(
            &p.flags,
            Some(v),
            FlagsSource {
                kind: "install",
                detail: String::new(),
            },
            Platform::Linux,
            String::new(),
            &launch,
            None,
            Vec::new(),
        )
    }

    #[test]
    fn cpu_with_highvram_is_a_conflict() {
        let e = builtin(&["--cpu", "--highvram"], Platform::Linux);
        assert_eq!(e.accepted, Some(false));
        assert_eq!(e.conflicts.len(), 1);
        assert_eq!(
            e.conflicts[0].flags,
            ["--cpu".to_string(), "--highvram".to_string()]
        );
        assert_eq!(e.conflicts[0].group, "VRAM mode");
        assert_eq!(
            e.startup_error.as_deref(),
            Some("main.py: error: argument --highvram: not allowed with argument --cpu")
        );
    }

    #[test]
    fn unknown_flag_hints() {
        let e = old(&["--disable-dynamic-vram"]);
        assert_eq!(
            e.unknown_flags[0].hint,
            "--disable-dynamic-vram arrived in 0.15.0; this install is 0.3.64, which has no Dynamic VRAM: update ComfyUI or drop the flag"
        );
        let e = builtin(&["--normalvram"], Platform::Linux);
        assert!(
            e.unknown_flags[0].hint.contains("was removed"),
            "{}",
            e.unknown_flags[0].hint
        );
        let e = builtin(&["--highvrma"], Platform::Linux);
        assert!(e.unknown_flags[0].hint.contains("did you mean --highvram?"));
        let e = old(&["--my-custom-node-flag"]);
        assert!(e.unknown_flags[0].hint.contains("custom node"));
    }

    #[test]
    fn a_flag_missing_from_the_builtin_list_is_not_a_refusal() {
        let e = builtin(&["--flag-from-next-week"], Platform::Linux);
        assert_eq!(e.accepted, None);
        assert_eq!(e.startup_error, None);
        assert_eq!(
            e.unknown_flags[0].hint,
            "not in vrambisect's list for ComfyUI 0.38.1: run with --comfyui DIR to check your install"
        );
        let mut buf = Vec::new();
        e.render(&Style::plain(), &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(!text.contains("refuse"), "{text}");
        // An install that lacks a flag does refuse it.
        let e = old(&["--flag-from-next-week"]);
        assert_eq!(e.accepted, Some(false));
        assert!(e.startup_error.is_some());
    }

    #[test]
    fn flags_of_the_real_source_are_known_and_modelled() {
        // In the real cli_args.py of the v0.38 line, missing from the list written before it.
        for flag in [
            "--fp16-intermediates",
            "--enable-triton-backend",
            "--disable-triton-backend",
            "--enable-asset-hashing",
            "--date-based-output",
        ] {
            let e = builtin(&[flag], Platform::Linux);
            assert_eq!(e.accepted, Some(true), "{flag}");
        }
        let e = builtin(&["--force-fp16", "--fp16-intermediates"], Platform::Linux);
        let parts: Vec<(&str, &str)> = e
            .predicted
            .precision
            .iter()
            .map(|p| (p.part, p.dtype))
            .collect();
        assert_eq!(
            parts,
            [
                ("diffusion model", "fp16"),
                ("intermediates", "fp16"),
                ("compute", "fp16")
            ]
        );
        let e = builtin(&["--use-split-cross-attention"], Platform::Linux);
        assert_eq!(
            e.predicted.attention.as_deref(),
            Some("--use-split-cross-attention")
        );
        // Gone from the real list.
        assert_eq!(
            builtin(&["--disable-ipex-optimize"], Platform::Linux).accepted,
            None
        );
    }

    #[test]
    fn prefix_is_explained() {
        let e = builtin(&["--disable-dyn"], Platform::Linux);
        assert_eq!(e.accepted, Some(true));
        assert!(!e.predicted.dynamic_vram.enabled);
        assert!(
            e.predicted
                .advice
                .iter()
                .any(|a| a.text.contains("abbreviation"))
        );
    }

    #[test]
    fn render_mentions_everything_that_matters() {
        let e = builtin(&["--highvram", "--lowvram"], Platform::Windows);
        let mut buf = Vec::new();
        e.render(&Style::plain(), &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        for needle in [
            "ComfyUI will refuse to start",
            "argument --lowvram: not allowed with argument --highvram",
            "What the flags would set if ComfyUI accepted them:",
            "Dynamic VRAM   off: --highvram turns it off",
            "600 MiB",
            "Conflicts",
            "only GPU 0",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }
}
