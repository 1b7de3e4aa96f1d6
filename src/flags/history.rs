//! When each flag of the recorded help texts arrived in ComfyUI, and which flags the model
//! leaves out on purpose.
//!
//! `fixtures/help/history.tsv` is made by `fixtures/help/history.sh` from ComfyUI's git
//! history: for a flag of the 0.3.64 help, the first commit that spells it in `main.py` or
//! `comfy/cli_args.py`, its date and the version in `comfyui_version.py` at that commit. Flags
//! that arrived after the history at hand say so, with the recorded help they are in.

#[cfg(test)]
use super::defs;

/// The recorded history, one tab-separated row per flag.
const HISTORY: &str = include_str!("../../fixtures/help/history.tsv");

/// One flag's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub flag: &'static str,
    pub in_0_3_64: bool,
    pub in_0_38_1: bool,
    /// The commit that added it, when ComfyUI's history shows it.
    pub commit: Option<&'static str>,
    pub date: Option<&'static str>,
    /// `comfyui_version.py` at that commit (`before 0.3.11` when the file did not exist yet).
    pub version: Option<&'static str>,
}

/// Every recorded row.
pub(crate) fn rows() -> impl Iterator<Item = Row> {
    HISTORY.lines().skip(1).filter_map(|line| {
        let f: Vec<&'static str> = line.split('\t').collect();
        let known = |s: &'static str| (s != "-" && !s.is_empty()).then_some(s);
        (f.len() >= 6).then(|| Row {
            flag: f[0],
            in_0_3_64: f[1] == "yes",
            in_0_38_1: f[2] == "yes",
            commit: known(f[3]),
            date: known(f[4]),
            version: known(f[5]),
        })
    })
}

/// The row of `flag`.
pub(crate) fn of(flag: &str) -> Option<Row> {
    rows().find(|r| r.flag == flag)
}

/// "arrived in 0.3.30 (0dcc75ca, 2025-04-26)", when the history knows.
pub(crate) fn arrival_text(flag: &str) -> Option<String> {
    let row = of(flag)?;
    let (commit, date, version) = (row.commit?, row.date?, row.version?);
    let short = &commit[..commit.len().min(8)];
    Some(match version.strip_prefix("before ") {
        Some(v) => format!("arrived before {v} ({short}, {date})"),
        None => format!("arrived in {version} ({short}, {date})"),
    })
}

/// Flags of the recorded help texts that the flag model leaves out, and why. A flag of a
/// recorded help must be either modelled in [`defs`] or listed here: a new help text with a
/// flag in neither fails the tests until someone decides.
#[cfg(test)]
pub(crate) const NOT_MODELLED: &[(&str, &str)] = &[
    ("--listen", "networking"),
    ("--port", "networking"),
    ("--tls-keyfile", "networking"),
    ("--tls-certfile", "networking"),
    ("--enable-cors-header", "networking"),
    ("--max-upload-size", "networking"),
    ("--enable-compress-response-body", "networking"),
    ("--comfy-api-base", "networking"),
    ("--base-directory", "folders"),
    ("--extra-model-paths-config", "folders"),
    ("--output-directory", "folders"),
    ("--temp-directory", "folders"),
    ("--input-directory", "folders"),
    ("--user-directory", "folders"),
    ("--models-directory", "folders"),
    ("--date-based-output", "output file names"),
    ("--date-output-format", "output file names"),
    ("--auto-launch", "browser"),
    ("--disable-auto-launch", "browser"),
    (
        "--windows-standalone-build",
        "browser (its auto-launch is in the advice)",
    ),
    ("--force-channels-last", "memory layout, not size"),
    (
        "--supports-fp8-compute",
        "which compute path fp8 weights take, not their storage",
    ),
    ("--enable-triton-backend", "kernel choice in comfy-kitchen"),
    ("--disable-triton-backend", "kernel choice in comfy-kitchen"),
    (
        "--disable-ipex-optimize",
        "Intel IPEX kernel optimisation, gone from the v0.38 line",
    ),
    ("--preview-method", "previews"),
    ("--preview-size", "previews"),
    (
        "--force-upcast-attention",
        "numerics of attention, not its memory",
    ),
    (
        "--dont-upcast-attention",
        "numerics of attention, not its memory",
    ),
    ("--assert-graph-breaks", "compiler debugging"),
    ("--default-hashing-function", "file hashing"),
    ("--deterministic", "numerics"),
    ("--enable-manager", "ComfyUI-Manager"),
    ("--disable-manager-ui", "ComfyUI-Manager"),
    ("--enable-manager-legacy-ui", "ComfyUI-Manager"),
    ("--dont-print-server", "logging"),
    ("--verbose", "logging"),
    ("--log-stdout", "logging"),
    ("--quick-test-for-ci", "ComfyUI's own CI"),
    ("--disable-metadata", "output metadata"),
    ("--disable-all-custom-nodes", "custom nodes"),
    ("--whitelist-custom-nodes", "custom nodes"),
    ("--disabled-nodes-config", "custom nodes"),
    ("--disable-partner-nodes", "API nodes"),
    ("--offline", "API nodes and the frontend's network"),
    ("--disable-api-nodes", "API nodes"),
    ("--multi-user", "user storage"),
    ("--front-end-version", "frontend"),
    ("--front-end-root", "frontend"),
    ("--database-url", "assets database"),
    ("--disable-assets", "assets database"),
    (
        "--enable-assets",
        "assets database (a no-op the model knows of)",
    ),
    ("--enable-asset-hashing", "assets database"),
    ("--feature-flag", "server feature flags"),
    ("--list-feature-flags", "prints and exits"),
];

/// Whether the flag model has decided about `flag` (modelled or left out on purpose).
#[cfg(test)]
pub(crate) fn decided(flag: &str) -> bool {
    defs::lookup(flag).is_some() || NOT_MODELLED.iter().any(|(f, _)| *f == flag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::defs::Since;
    use crate::flags::help;
    use crate::flags::profile::{HELP_0_3_64, HELP_0_38_1};
    use std::collections::BTreeSet;

    fn options(text: &str) -> BTreeSet<String> {
        help::parse(text)
            .unwrap()
            .options
            .iter()
            .map(|o| o.name().to_string())
            .filter(|n| n != "--help")
            .collect()
    }

    #[test]
    fn history_covers_exactly_the_recorded_helps() {
        let old = options(HELP_0_3_64);
        let new = options(HELP_0_38_1);
        let all: BTreeSet<String> = old.union(&new).cloned().collect();
        let listed: BTreeSet<String> = rows().map(|r| r.flag.to_string()).collect();
        assert_eq!(listed, all, "regenerate history.tsv with history.sh");
        for r in rows() {
            assert_eq!(r.in_0_3_64, old.contains(r.flag), "{}", r.flag);
            assert_eq!(r.in_0_38_1, new.contains(r.flag), "{}", r.flag);
            // Every flag of the oldest recorded release has its commit.
            assert_eq!(r.in_0_3_64, r.commit.is_some(), "{}", r.flag);
        }
    }

    #[test]
    fn every_flag_of_a_recorded_help_is_decided() {
        for text in [HELP_0_3_64, HELP_0_38_1] {
            for flag in options(text) {
                assert!(
                    decided(&flag),
                    "{flag} is in a recorded help but neither modelled in flags::defs nor listed in NOT_MODELLED"
                );
            }
        }
        let known: BTreeSet<String> = rows().map(|r| r.flag.to_string()).collect();
        for (flag, _) in NOT_MODELLED {
            assert!(known.contains(*flag), "{flag} is in no recorded help");
            assert!(defs::lookup(flag).is_none(), "{flag} is also modelled");
        }
    }

    #[test]
    fn the_model_agrees_with_the_history() {
        for def in defs::ALL {
            let row = of(def.name).unwrap_or_else(|| panic!("{} in no recorded help", def.name));
            match def.since {
                Since::Old => assert!(row.in_0_3_64, "{}: Since::Old", def.name),
                Since::Release(_) | Since::Between(..) => {
                    assert!(!row.in_0_3_64, "{}: arrived after 0.3.64", def.name)
                }
            }
            assert_eq!(def.removed.is_some(), !row.in_0_38_1, "{}", def.name);
        }
    }

    #[test]
    fn arrival_texts() {
        assert_eq!(
            arrival_text("--async-offload").as_deref(),
            Some("arrived in 0.3.30 (0dcc75ca, 2025-04-26)")
        );
        assert_eq!(
            arrival_text("--cpu").as_deref(),
            Some("arrived before 0.3.11 (dd29966f, 2023-04-05)")
        );
        assert_eq!(arrival_text("--vram-headroom"), None);
    }
}
