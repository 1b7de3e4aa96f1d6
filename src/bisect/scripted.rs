//! A scripted oracle: decides outcomes from the configuration's flags, without ComfyUI.
//! Used by the strategy tests and by the bisect benchmark.

use super::search::{Oracle, Stopped, Trial};
use super::space::Config;
use crate::outcome::Outcome;
use std::collections::BTreeSet;

/// Memory switches of the v0.38 line that combine freely (no value, no group clash): the
/// toggles of the strategy tests and the benchmark.
pub const SWITCHES: &[&str] = &[
    "--disable-dynamic-vram",
    "--disable-pinned-memory",
    "--disable-async-offload",
    "--disable-smart-memory",
    "--disable-cuda-graphs",
    "--disable-mmap",
    "--force-non-blocking",
    "--fast-disk",
    "--mmap-torch-files",
    "--disable-comfy-compiler",
    "--cpu-vae",
    "--deterministic",
];

/// Decides whether a set of flags (`--flag` or `--flag=value`) fixes the failure.
pub type Rule = Box<dyn Fn(&BTreeSet<String>) -> bool>;

/// An oracle whose failing configurations fail with probability `p` (1.0: always).
pub struct Scripted {
    fixes: Rule,
    pub p_fail: f64,
    pub failure: Outcome,
    rng: u64,
    pub runs: u32,
}

impl Scripted {
    pub fn new(fixes: Rule, p_fail: f64, seed: u64) -> Scripted {
        Scripted {
            fixes,
            p_fail,
            failure: Outcome::Oom,
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            runs: 0,
        }
    }

    /// Deterministic: failing configurations always fail.
    pub fn deterministic(fixes: Rule) -> Scripted {
        Scripted::new(fixes, 1.0, 1)
    }

    fn next(&mut self) -> f64 {
        unit(&mut self.rng)
    }
}

/// The next number in [0, 1) of a seeded generator (xorshift64*: small, good enough for a
/// simulation; the scripted oracle and the scripted flaky history share it).
pub fn unit(state: &mut u64) -> f64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
}

/// The flags of a configuration as a set of `--flag` / `--flag=value` words.
pub fn flag_set(config: &Config) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut iter = config.flags.iter().peekable();
    while let Some(f) = iter.next() {
        match iter.peek() {
            Some(v) if !v.starts_with("--") => {
                out.insert(format!("{f}={v}"));
                iter.next();
            }
            _ => {
                out.insert(f.clone());
            }
        }
    }
    out
}

impl Oracle for Scripted {
    fn run(&mut self, config: &Config) -> Result<Trial, Stopped> {
        self.runs += 1;
        let fixed = (self.fixes)(&flag_set(config));
        let fails = !fixed && self.next() < self.p_fail;
        Ok(Trial::of(if fails { self.failure } else { Outcome::Pass }))
    }
}
