//! From a known issue to the experiment that tests it: the exact `vrambisect bisect` command
//! with the catalogue's flags as toggles and the launch flags the log shows as the base.
//!
//! A toggle is left out when it cannot tell anything on this install: the flag is already in
//! the launch flags, this ComfyUI version does not have it (argparse would refuse it, exit 2),
//! or it only acts on Dynamic VRAM and the log shows Dynamic VRAM off.

use crate::classify::catalogue::Signature;
use crate::flags::defs;
use crate::version::Version;
use serde::Serialize;

/// Stands for the ComfyUI folder when the log does not name it.
pub(crate) const DIR: &str = "DIR";
/// Stands for the workflow, which a log never contains.
pub(crate) const WORKFLOW: &str = "WORKFLOW.json";
/// The most prompts per run worth suggesting.
const MAX_ITERATIONS: u32 = 10;

/// What the log says about the install the failure happened on.
#[derive(Debug, Clone, Default)]
pub(crate) struct Setup {
    /// ComfyUI's flags, when the log shows them.
    pub launch_args: Option<Vec<String>>,
    pub comfyui_dir: Option<String>,
    pub comfyui_version: Option<String>,
    pub dynamic_vram: Option<bool>,
    /// The failure never came on a prompt earlier than this one after a server start.
    pub first_failing_prompt: Option<u32>,
}

/// A toggle that was left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub flag: String,
    pub reason: String,
}

/// The experiment for one known issue.
#[derive(Debug, Clone, Serialize)]
pub struct Bisect {
    /// The command line to paste; null when no flag is worth testing.
    pub command: Option<String>,
    /// The same, one argument per element.
    pub argv: Vec<String>,
    pub toggles: Vec<String>,
    pub skipped: Vec<Skipped>,
    /// What to fill in or know before running it.
    pub notes: Vec<String>,
}

/// Flags that only act while Dynamic VRAM is on.
const DYNAMIC_ONLY: &[&str] = &[
    "--disable-dynamic-vram",
    "--vram-headroom",
    "--disable-nvml-pressure",
];

fn flag_name(toggle: &str) -> &str {
    toggle.split('=').next().unwrap_or(toggle)
}

/// Builds the bisect command for `sig` on `setup`.
pub(crate) fn bisect(sig: &Signature, setup: &Setup) -> Bisect {
    let version = setup.comfyui_version.as_deref().and_then(Version::parse);
    let base = setup.launch_args.as_deref().unwrap_or(&[]);
    let mut toggles = Vec::new();
    let mut skipped = Vec::new();
    for toggle in sig.flags_to_try {
        let name = flag_name(toggle);
        let skip = |reason: String| Skipped {
            flag: toggle.to_string(),
            reason,
        };
        if base.iter().any(|a| flag_name(a) == name) {
            skipped.push(skip(format!("{name} is already in the launch flags")));
            continue;
        }
        if let (Some(v), Some(def)) = (&version, defs::lookup(name))
            && def.exists_in(v) == Some(false)
        {
            skipped.push(skip(format!(
                "ComfyUI {v} has no {name}: it {}",
                def.since_text()
            )));
            continue;
        }
        if setup.dynamic_vram == Some(false) && DYNAMIC_ONLY.contains(&name) {
            skipped.push(skip(format!(
                "the log shows Dynamic VRAM off, so {name} changes nothing"
            )));
            continue;
        }
        toggles.push(toggle.to_string());
    }
    let mut notes = Vec::new();
    if sig.outcome == crate::outcome::Outcome::FlagRejected {
        let flags = match &setup.launch_args {
            Some(args) if !args.is_empty() => crate::text::command_line(args),
            _ => "YOUR_FLAGS".to_string(),
        };
        let dir = setup.comfyui_dir.as_deref().unwrap_or(DIR);
        notes.push(format!(
            "see what ComfyUI makes of the flags: vrambisect explain --comfyui {} -- {flags}",
            crate::text::command_line(&[dir.to_string()])
        ));
    }
    if toggles.is_empty() {
        notes.push(if sig.flags_to_try.is_empty() {
            "no flag to bisect for this one: fix what it says, then start ComfyUI again".to_string()
        } else {
            "no flag left to test on this install".to_string()
        });
        return Bisect {
            command: None,
            argv: Vec::new(),
            toggles,
            skipped,
            notes,
        };
    }
    let mut b = with_toggles(toggles, setup);
    notes.append(&mut b.notes);
    b.notes = notes;
    b.skipped = skipped;
    b
}

/// The bisect command for given toggles on `setup`.
pub(crate) fn with_toggles(toggles: Vec<String>, setup: &Setup) -> Bisect {
    let mut notes = Vec::new();
    let dir = setup.comfyui_dir.clone().unwrap_or_else(|| DIR.to_string());
    let mut argv = crate::locate::Origin::current().program();
    argv.extend(
        ["bisect", "--comfyui", &dir, "--workflow", WORKFLOW]
            .iter()
            .map(|s| s.to_string()),
    );
    for t in &toggles {
        argv.push("--toggle".into());
        argv.push(t.clone());
    }
    if let Some(n) = setup.first_failing_prompt
        && n >= 2
    {
        let n = n.min(MAX_ITERATIONS);
        argv.push("--iterations".into());
        argv.push(n.to_string());
        notes.push(format!(
            "--iterations {n}: in this log it never failed before prompt {n} after a start (some failures only come on a later prompt, #15269)"
        ));
    }
    if setup.comfyui_dir.is_none() {
        notes.push(format!(
            "{DIR}: your ComfyUI folder (the one holding main.py)"
        ));
    }
    notes.push(format!(
        "{WORKFLOW}: the failing workflow: the file ComfyUI saved, its API export, or an image or video ComfyUI made with it"
    ));
    match &setup.launch_args {
        Some(args) if !args.is_empty() => {
            argv.push("--".into());
            argv.extend(args.iter().cloned());
        }
        Some(_) => {}
        None => notes.push(
            "the log does not show ComfyUI's launch flags: add yours after -- (as in run_nvidia_gpu.bat or your start script)".into(),
        ),
    }
    Bisect {
        command: Some(crate::text::command_line(&argv)),
        argv,
        toggles,
        skipped: Vec::new(),
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::catalogue::by_id;

    fn setup(args: Option<&[&str]>, version: &str, dynamic: Option<bool>) -> Setup {
        Setup {
            launch_args: args.map(|a| a.iter().map(|s| s.to_string()).collect()),
            comfyui_dir: None,
            comfyui_version: Some(version.into()),
            dynamic_vram: dynamic,
            first_failing_prompt: None,
        }
    }

    #[test]
    fn command_for_an_async_oom_on_the_portable_build() {
        let sig = by_id("cuda_oom_async").unwrap();
        let b = bisect(
            sig,
            &setup(
                Some(&["--windows-standalone-build", "--enable-manager"]),
                "0.38.1",
                Some(true),
            ),
        );
        assert_eq!(
            b.command.as_deref(),
            Some(
                "vrambisect bisect --comfyui DIR --workflow WORKFLOW.json --toggle --disable-dynamic-vram --toggle --reserve-vram=1 --toggle --vram-headroom=1 --toggle --disable-cuda-malloc -- --windows-standalone-build --enable-manager"
            )
        );
        assert!(b.skipped.is_empty());
    }

    #[test]
    fn toggles_that_cannot_tell_anything_are_left_out() {
        let sig = by_id("aimdo_non_oom").unwrap();
        let b = bisect(
            sig,
            &Setup {
                first_failing_prompt: Some(2),
                comfyui_dir: Some("/srv/ComfyUI".into()),
                ..setup(Some(&["--disable-pinned-memory"]), "0.38.1", Some(true))
            },
        );
        assert_eq!(b.toggles, ["--disable-dynamic-vram"]);
        assert_eq!(b.skipped[0].flag, "--disable-pinned-memory");
        assert_eq!(
            b.command.as_deref(),
            Some(
                "vrambisect bisect --comfyui /srv/ComfyUI --workflow WORKFLOW.json --toggle --disable-dynamic-vram --iterations 2 -- --disable-pinned-memory"
            )
        );

        // 0.3.64 has neither Dynamic VRAM nor pinned memory.
        let oom = by_id("cuda_oom_native").unwrap();
        let b = bisect(oom, &setup(Some(&["--cpu"]), "0.3.64", Some(false)));
        assert_eq!(b.toggles, ["--reserve-vram=1"]);
        assert!(
            b.skipped
                .iter()
                .any(|s| s.reason.contains("0.3.64 has no --disable-dynamic-vram"))
        );

        // Dynamic VRAM off by flag: no point in disabling it again.
        let b = bisect(oom, &setup(None, "0.38.1", Some(false)));
        assert!(!b.toggles.contains(&"--disable-dynamic-vram".to_string()));
        assert!(
            b.notes
                .iter()
                .any(|n| n.contains("does not show ComfyUI's launch flags"))
        );
    }

    #[test]
    fn signatures_without_flags_explain_instead() {
        let sig = by_id("missing_comfy_aimdo").unwrap();
        let b = bisect(sig, &Setup::default());
        assert_eq!(b.command, None);
        assert!(b.notes[0].starts_with("no flag to bisect"));
        let b = bisect(
            by_id("argparse_rejected").unwrap(),
            &setup(Some(&["--normalvram"]), "0.38.1", None),
        );
        assert_eq!(
            b.notes[0],
            "see what ComfyUI makes of the flags: vrambisect explain --comfyui DIR -- --normalvram"
        );
    }

    #[test]
    fn quoting() {
        let argv: Vec<String> = [
            "a",
            "--output-directory",
            r"D:\My Images",
            "--reserve-vram=1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            crate::text::command_line(&argv),
            r#"a --output-directory "D:\My Images" --reserve-vram=1"#
        );
    }
}
