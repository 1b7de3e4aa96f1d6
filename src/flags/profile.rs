//! Built-in flag lists of known ComfyUI versions, for when no install is given.
//!
//! Each is the verbatim `--help` text of that version, parsed with [`super::help`], so the
//! built-in knowledge and the install-reading path are one code path.

use super::help::{self, FlagSet};
use crate::version::Version;

/// The `--help` of ComfyUI 0.3.64 as recorded on a real install.
pub const HELP_0_3_64: &str = include_str!("../../fixtures/help/v0.3.64.txt");
/// The `--help` of the v0.38 line, generated from its real `comfy/cli_args.py` (see
/// `fixtures/help/README.md` for the commit).
pub const HELP_0_38_1: &str = include_str!("../../fixtures/help/v0.38.1.txt");

/// A built-in flag list and the version it belongs to.
pub struct Profile {
    pub version: Version,
    pub flags: FlagSet,
}

/// The built-in profile closest to `version` (the newest when unknown).
pub fn builtin(version: Option<&Version>) -> Profile {
    let old = Version::lit("0.3.64");
    let text = match version {
        Some(v) if *v < crate::version::dynamic_vram_release() => (old, HELP_0_3_64),
        _ => (Version::lit("0.38.1"), HELP_0_38_1),
    };
    Profile {
        version: text.0,
        flags: help::parse(text.1).expect("built-in help texts parse"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_builtin_profiles_parse() {
        let old = builtin(Some(&Version::lit("0.3.64")));
        assert!(old.flags.has("--normalvram"));
        let new = builtin(None);
        assert_eq!(new.version, Version::lit("0.38.1"));
        assert!(new.flags.has("--disable-dynamic-vram"));
        assert!(!new.flags.has("--normalvram"));
    }
}
