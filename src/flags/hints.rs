//! What to say about a flag an install does not know: when it arrived or went, the flag that
//! was probably meant, or that only vrambisect's built-in list lacks it.

use super::defs;
use super::help::FlagSet;
use crate::version::{self, Version};

/// Why an install does not know a flag, and what to do.
pub(crate) fn unknown(flag: &str, flags: &FlagSet, version: Option<&Version>) -> String {
    if !flag.starts_with('-') {
        return "a value that no flag takes: check the flag before it".into();
    }
    let name = flag.split('=').next().unwrap_or(flag);
    let this = version
        .map(|v| format!("this install is {v}"))
        .unwrap_or_else(|| "this install's version is unknown".into());
    let of_this = version
        .map(|v| format!("ComfyUI {v}"))
        .unwrap_or_else(|| "this install".into());
    if let Some(def) = defs::lookup(name) {
        if let (Some(v), Some(defs::Removed(present, gone))) = (version, def.removed)
            && *v > Version::lit(present)
        {
            return format!(
                "{name} was removed from ComfyUI (it is in {present}, not in {gone}); {this}: drop it"
            );
        }
        let mut hint = format!("{name} {}; {this}", def.since_text());
        let dynamic_flag = matches!(
            name,
            "--disable-dynamic-vram"
                | "--enable-dynamic-vram"
                | "--vram-headroom"
                | "--disable-nvml-pressure"
        );
        if dynamic_flag && version.is_some_and(|v| *v < version::dynamic_vram_release()) {
            hint.push_str(", which has no Dynamic VRAM");
        }
        hint.push_str(": update ComfyUI or drop the flag");
        return hint;
    }
    let candidates = flags.options.iter().map(|o| o.name());
    if let Some(near) = closest(name, candidates) {
        return format!("not a flag of {of_this}; did you mean {near}?");
    }
    format!(
        "not a flag of {of_this} (a custom node's flag?): ComfyUI refuses unknown flags with exit 2"
    )
}

/// What a flag missing from the built-in list means: only that vrambisect's list lacks it.
pub(crate) fn builtin_unknown(flag: &str, flags: &FlagSet, version: Option<&Version>) -> String {
    let list = version
        .map(|v| format!("vrambisect's list for ComfyUI {v}"))
        .unwrap_or_else(|| "vrambisect's built-in list".into());
    if !flag.starts_with('-') {
        return format!(
            "a value that no flag in {list} takes (the value of an unknown flag before it?)"
        );
    }
    let name = flag.split('=').next().unwrap_or(flag);
    let mut hint = format!("not in {list}: run with --comfyui DIR to check your install");
    if let Some(def) = defs::lookup(name)
        && let Some(defs::Removed(present, gone)) = def.removed
    {
        hint = format!(
            "{name} was removed from ComfyUI (it is in {present}, not in {gone}); an install newer than {present} may refuse it: run with --comfyui DIR to check yours"
        );
    } else if let Some(near) = closest(name, flags.options.iter().map(|o| o.name())) {
        hint.push_str(&format!("; did you mean {near}?"));
    }
    hint
}

/// The known flag within a small edit distance of `name`.
fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let len = name.chars().count();
    candidates
        // Lengths further apart than the distance allowed cannot be near: a flag of 100 KiB
        // is compared with nothing.
        .filter(|c| len.abs_diff(c.chars().count()) <= 2.max(c.len() / 6))
        .map(|c| (levenshtein(name, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 6))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_of_another_length_is_near_nothing() {
        let flags = ["--lowvram", "--highvram", "--disable-dynamic-vram"];
        assert_eq!(closest("--lowvran", flags.into_iter()), Some("--lowvram"));
        let long = format!("--{}", "a".repeat(100 << 10));
        assert_eq!(closest(&long, flags.into_iter()), None);
    }

    #[test]
    fn edit_distance() {
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "ab"), 2);
    }
}
