//! A scripted oracle: decides outcomes from the configuration's flags, without ComfyUI.
//! Used by the strategy tests and by the bisect benchmark.

use super::search::{Oracle, RunKind, Stopped, Trial};
use super::space::Config;
use crate::outcome::Outcome;
use crate::session::failure::FailedAt;
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
    /// Shortened runs: `None`, the workflow cannot be shortened; `Some(true)`, they fail as
    /// full ones do; `Some(false)`, they pass (a failure that needs the whole length).
    pub quick: Option<bool>,
    /// Milliseconds a run takes: (full pass, full failure, quick pass, quick failure).
    pub times: (u64, u64, u64, u64),
}

impl Scripted {
    pub fn new(fixes: Rule, p_fail: f64, seed: u64) -> Scripted {
        Scripted {
            fixes,
            p_fail,
            failure: Outcome::Oom,
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            runs: 0,
            quick: None,
            times: (0, 0, 0, 0),
        }
    }

    /// Deterministic: failing configurations always fail.
    pub fn deterministic(fixes: Rule) -> Scripted {
        Scripted::new(fixes, 1.0, 1)
    }

    fn next(&mut self) -> f64 {
        crate::bayes::unit(&mut self.rng)
    }
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
    fn run(&mut self, config: &Config, kind: RunKind) -> Result<Trial, Stopped> {
        self.runs += 1;
        let fixed = (self.fixes)(&flag_set(config));
        let mut fails = !fixed && self.next() < self.p_fail;
        let mut trial = Trial::of(Outcome::Pass);
        match (kind, self.quick) {
            (RunKind::Quick, None) => trial.unshortened = Some("it cannot be shortened".into()),
            (RunKind::Quick, Some(reproduces)) => {
                trial.kind = RunKind::Quick;
                fails &= reproduces;
            }
            (RunKind::Full, _) => {}
        }
        let (full_pass, full_fail, quick_pass, quick_fail) = self.times;
        trial.duration_ms = match (trial.kind, fails) {
            (RunKind::Full, false) => full_pass,
            (RunKind::Full, true) => full_fail,
            (RunKind::Quick, false) => quick_pass,
            (RunKind::Quick, true) => quick_fail,
        };
        if fails {
            trial.outcome = self.failure;
            trial.failed_at = Some(FailedAt {
                iteration: 1,
                node: Some("3".into()),
            });
        }
        Ok(trial)
    }

    fn can_shorten(&self) -> bool {
        self.quick.is_some()
    }
}
