//! The search space of a bisect: the user's base flags, the toggles to try, and the
//! configurations they make (valid ones only, equivalent ones merged).

use crate::flags::argparse::{self, Given};
use crate::flags::decide::Context;
use crate::flags::help::FlagSet;
use crate::version::Version;
use serde::{Deserialize, Serialize};

/// One dimension of the search: something the bisect may change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Dim {
    /// Add `flag`, with one of `values` (ascending; `[None]` for a switch).
    Add {
        flag: String,
        values: Vec<Option<String>>,
    },
    /// Remove one of the user's own flags (with its values).
    Remove { flag: String, values: Vec<String> },
}

impl Dim {
    /// How many alternatives the dimension has.
    pub fn alternatives(&self) -> usize {
        match self {
            Dim::Add { values, .. } => values.len(),
            Dim::Remove { .. } => 1,
        }
    }

    /// The flag's name.
    pub fn flag(&self) -> &str {
        match self {
            Dim::Add { flag, .. } | Dim::Remove { flag, .. } => flag,
        }
    }

    /// How the change reads: `--reserve-vram 2`, `without --highvram`.
    pub fn describe(&self, alt: usize) -> String {
        match self {
            Dim::Add { flag, values } => match values.get(alt).cloned().flatten() {
                Some(v) => format!("{flag} {v}"),
                None => flag.clone(),
            },
            Dim::Remove { flag, values } => {
                let mut s = format!("without {flag}");
                for v in values {
                    s.push(' ');
                    s.push_str(v);
                }
                s
            }
        }
    }
}

/// A choice of alternatives: `(dimension index, alternative index)`, sorted by dimension.
pub type Choice = Vec<(usize, usize)>;

/// A configuration to run: ComfyUI's flags, and what distinguishes it from the baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub flags: Vec<String>,
    pub choice: Choice,
    /// The flags that change something here, sorted: equal keys are equivalent configurations.
    pub key: String,
}

/// Why a toggle was left out of the search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub toggle: String,
    pub reason: String,
    /// This ComfyUI does not take it (an unknown flag, a bad value); otherwise it changes
    /// nothing (already among the user's flags).
    #[serde(default, skip_serializing)]
    pub refused: bool,
}

/// The whole space.
#[derive(Debug, Clone)]
pub struct Space {
    pub base: Vec<Given>,
    pub dims: Vec<Dim>,
    pub skipped: Vec<Skipped>,
    /// The flags whose least passing value is searched (a size flag given to `--toggle`
    /// without a value), with the most that is tried.
    pub value_searches: Vec<ValueSearch>,
    flags: FlagSet,
    ctx: Context,
}

/// A size flag whose value is searched: every multiple of [`VALUE_STEP_GB`] up to `max_gb`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValueSearch {
    pub flag: String,
    pub max_gb: f64,
    /// Where the upper end comes from (the card's memory, or the system's RAM).
    pub from: String,
}

/// The most a value search tries, and where that comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ceiling {
    pub gb: f64,
    pub from: String,
}

/// The step of a value search, in GB.
pub const VALUE_STEP_GB: f64 = 0.25;

/// The values a value search tries: every step from one step to `max_gb`.
pub fn value_grid(max_gb: f64) -> Vec<Option<String>> {
    let n = (max_gb / VALUE_STEP_GB + 1e-9).floor() as u64;
    (1..=n)
        .map(|i| Some(format_gb(i as f64 * VALUE_STEP_GB)))
        .collect()
}

/// `0.25`, `1`, `1.5`: as a person writes a size in GB.
pub fn format_gb(gb: f64) -> String {
    let s = format!("{gb:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Whether this install's `flag` takes one size in GB: one value by its own `--help`, and a
/// size by the flag model or by its help text.
pub fn is_size_flag(flags: &FlagSet, flag: &str) -> bool {
    let Some(opt) = flags.get(flag) else {
        return false;
    };
    if opt.nargs != crate::flags::help::Nargs::One {
        return false;
    }
    let modelled = crate::flags::defs::lookup(opt.name())
        .is_some_and(|d| matches!(d.value, crate::flags::defs::ValueKind::Float { unit: "GB" }));
    modelled || opt.help.contains(" GB") || opt.help.contains("in GB")
}

/// The toggles tried when the user gives none, in order of how often they fix things
/// (Dynamic VRAM first: it is the change behind most reports).
pub const DEFAULT_TOGGLES: &[&str] = &[
    "--disable-dynamic-vram",
    "--disable-pinned-memory",
    "--disable-async-offload",
    "--disable-nvml-pressure",
];

impl Space {
    /// Builds the space from the base flags and `--toggle` values (`--flag` or `--flag=value`).
    /// Several values of one flag become one dimension whose values are searched in order.
    pub fn new(
        flags: &FlagSet,
        version: Option<Version>,
        ctx: Context,
        base: &[String],
        toggles: &[String],
    ) -> Space {
        let parsed = argparse::parse(flags, base, version.as_ref());
        let mut dims: Vec<Dim> = Vec::new();
        let mut skipped = Vec::new();
        for toggle in toggles {
            let (name, value) = match toggle.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => {
                    let mut parts = toggle.split_whitespace();
                    let n = parts.next().unwrap_or("").to_string();
                    let rest: Vec<&str> = parts.collect();
                    (n, (!rest.is_empty()).then(|| rest.join(" ")))
                }
            };
            // A size flag without a value: its least passing value is searched (the values
            // are set by `with_ceiling`, once the upper end is known).
            if value.is_none() && is_size_flag(flags, &name) {
                let canonical = flags
                    .get(&name)
                    .map(|o| o.name().to_string())
                    .unwrap_or(name);
                if !dims.iter().any(|d| d.flag() == canonical) {
                    dims.push(Dim::Add {
                        flag: canonical,
                        values: Vec::new(),
                    });
                }
                continue;
            }
            // Resolve through argparse so a prefix or an unknown flag is caught here.
            let mut probe = vec![name.clone()];
            if let Some(v) = &value {
                probe.push(v.clone());
            }
            let p = argparse::parse(flags, &probe, version.as_ref());
            if let Some(err) = &p.error {
                let reason = if p.unknown.contains(&name) {
                    crate::flags::hints::unknown(&name, flags, version.as_ref())
                } else {
                    err.clone()
                };
                skipped.push(Skipped {
                    toggle: toggle.clone(),
                    reason,
                    refused: true,
                });
                continue;
            }
            let Some(g) = p.given.first() else { continue };
            let canonical = g.flag.clone();
            if parsed.has(&canonical) && value.is_none() {
                skipped.push(Skipped {
                    toggle: toggle.clone(),
                    reason: format!("{canonical} is already among your flags (the bisect tries removing it instead)"),
                    refused: false,
                });
                continue;
            }
            match dims
                .iter_mut()
                .find(|d| matches!(d, Dim::Add { flag, .. } if *flag == canonical))
            {
                Some(Dim::Add { values, .. }) => {
                    if !values.contains(&value) {
                        values.push(value);
                    }
                }
                _ => dims.push(Dim::Add {
                    flag: canonical,
                    values: vec![value],
                }),
            }
        }
        for d in &mut dims {
            if let Dim::Add { values, .. } = d {
                sort_values(values);
            }
        }
        // The user's own memory-related flags are part of the question too.
        for g in &parsed.given {
            if is_removable(&g.flag) {
                dims.push(Dim::Remove {
                    flag: g.flag.clone(),
                    values: g.values.clone(),
                });
            }
        }
        Space {
            base: parsed.given,
            dims,
            skipped,
            value_searches: Vec::new(),
            flags: flags.clone(),
            ctx: Context { version, ..ctx },
        }
    }

    /// Sets the values of the flags whose value is searched: every step up to the ceiling.
    /// Without one (nothing says how much memory there is), or where the flag is already
    /// among the user's flags, the flag is left out, and says why.
    pub fn with_ceiling(mut self, ceiling: Option<&Ceiling>) -> Space {
        let mut kept = Vec::new();
        for d in std::mem::take(&mut self.dims) {
            match d {
                Dim::Add { flag, values } if values.is_empty() => {
                    let own = self.base.iter().any(|g| g.flag == flag);
                    match ceiling {
                        Some(c) if !own && c.gb >= VALUE_STEP_GB => {
                            self.value_searches.push(ValueSearch {
                                flag: flag.clone(),
                                max_gb: (c.gb / VALUE_STEP_GB).floor() * VALUE_STEP_GB,
                                from: c.from.clone(),
                            });
                            kept.push(Dim::Add {
                                values: value_grid(c.gb),
                                flag,
                            });
                        }
                        _ => self.skipped.push(Skipped {
                            reason: if own {
                                format!("{flag} is already among your flags (the bisect tries removing it instead)")
                            } else {
                                format!("no upper end is known for {flag}'s value: give values to try (--toggle {flag}=1 --toggle {flag}=2)")
                            },
                            toggle: flag,
                            refused: false,
                        }),
                    }
                }
                d => kept.push(d),
            }
        }
        self.dims = kept;
        self
    }

    /// Whether this ComfyUI has Dynamic VRAM at all (0.3.64 and the like predate it).
    pub fn has_dynamic_vram(&self) -> bool {
        self.ctx.has_dynamic_vram()
    }

    /// Whether a configuration keeps Dynamic VRAM on, as the flag model predicts.
    pub fn keeps_dynamic_vram(&self, config: &Config) -> Option<bool> {
        let parsed = argparse::parse(&self.flags, &config.flags, self.ctx.version.as_ref());
        parsed.error.is_none().then(|| {
            crate::flags::decide::decide(&parsed, &self.ctx)
                .dynamic_vram
                .enabled
        })
    }

    /// What ComfyUI decides about memory under a configuration (null where the flag model
    /// cannot parse it): Dynamic VRAM, the VRAM state, the reserve, pinned memory, async
    /// offload, the allocator and the cache.
    fn memory_state(&self, choice: &[(usize, usize)]) -> Option<String> {
        let config = self.config(choice)?;
        let parsed = argparse::parse(&self.flags, &config.flags, self.ctx.version.as_ref());
        if parsed.error.is_some() {
            return None;
        }
        let p = crate::flags::decide::decide(&parsed, &self.ctx);
        Some(format!(
            "{:?} {} {} {} {:?} {} {}",
            p.dynamic_vram.enabled,
            p.vram_state,
            p.reserved_vram_mb,
            p.pinned_memory,
            p.async_offload_streams,
            p.allocator,
            p.cache
        ))
    }

    /// Whether change `d` may be undone by another change of `with`, as the flag model sees
    /// it: it is a flag the model calls a no-op there (`--vram-headroom` beside
    /// `--disable-dynamic-vram`), or it changes ComfyUI's memory decisions alone but not
    /// there (`--disable-dynamic-vram` beside `--highvram`). A change `with` does not hold
    /// (it could not be combined), and a configuration the model cannot read, count as
    /// undone: a run decides.
    pub fn undone(&self, d: usize, with: &[(usize, usize)]) -> bool {
        let Some(&own) = with.iter().find(|(x, _)| *x == d) else {
            return true;
        };
        if self.no_op_in(d, with) == Some(true) && self.no_op_in(d, &[own]) == Some(false) {
            return true;
        }
        let without: Choice = with.iter().filter(|(x, _)| *x != d).copied().collect();
        match (
            self.memory_state(&[own]),
            self.memory_state(&[]),
            self.memory_state(with),
            self.memory_state(&without),
        ) {
            (Some(alone), Some(base), Some(all), Some(rest)) => alone != base && all == rest,
            _ => true,
        }
    }

    /// Whether the flag model calls change `d`'s flag a no-op under `choice`.
    fn no_op_in(&self, d: usize, choice: &[(usize, usize)]) -> Option<bool> {
        let config = self.config(choice)?;
        let parsed = argparse::parse(&self.flags, &config.flags, self.ctx.version.as_ref());
        if parsed.error.is_some() {
            return None;
        }
        let flag = self.dims[d].flag();
        Some(
            crate::flags::decide::decide(&parsed, &self.ctx)
                .no_op
                .iter()
                .any(|n| n.flag == flag),
        )
    }

    /// The VRAM, in GB, ComfyUI reserves with this configuration's flags (`--reserve-vram`
    /// replaces the OS default, it does not add to it).
    pub fn reserved_vram_gb(&self, config: &Config) -> Option<f64> {
        let parsed = argparse::parse(&self.flags, &config.flags, self.ctx.version.as_ref());
        parsed.error.is_none().then(|| {
            crate::flags::decide::decide(&parsed, &self.ctx).reserved_vram_mb as f64 / 1024.0
        })
    }

    /// The configuration for `choice`, or `None` when ComfyUI would refuse it.
    pub fn config(&self, choice: &[(usize, usize)]) -> Option<Config> {
        let mut choice: Choice = choice.to_vec();
        choice.sort();
        let removed: Vec<&str> = choice
            .iter()
            .filter_map(|(d, _)| match &self.dims[*d] {
                Dim::Remove { flag, .. } => Some(flag.as_str()),
                _ => None,
            })
            .collect();
        let mut flags: Vec<String> = Vec::new();
        for g in self
            .base
            .iter()
            .filter(|g| !removed.contains(&g.flag.as_str()))
        {
            push_given(&mut flags, g);
        }
        for (d, alt) in &choice {
            if let Dim::Add { flag, values } = &self.dims[*d] {
                flags.push(flag.clone());
                if let Some(Some(v)) = values.get(*alt) {
                    flags.push(v.clone());
                }
            }
        }
        let parsed = argparse::parse(&self.flags, &flags, self.ctx.version.as_ref());
        if !parsed.accepted() {
            return None;
        }
        // Two configurations are one only when ComfyUI would parse them to the same
        // arguments (an abbreviation, a flag given twice). What the flag model predicts (a
        // no-op, an implied setting) may order the search, never stand in for a run: the
        // real ComfyUI acts on flags the model calls no-ops (`--async-offload` under `--cpu`).
        let mut key_parts: Vec<String> = parsed
            .given
            .iter()
            .map(|g| {
                let mut s = g.flag.clone();
                for v in &g.values {
                    s.push('=');
                    s.push_str(v);
                }
                s
            })
            .collect();
        key_parts.sort();
        key_parts.dedup();
        Some(Config {
            flags,
            choice,
            key: key_parts.join(" "),
        })
    }

    /// The baseline: the user's flags unchanged.
    pub fn baseline(&self) -> Config {
        self.config(&[]).unwrap_or_else(|| Config {
            flags: self.base_tokens(),
            choice: Vec::new(),
            key: String::from("(baseline)"),
        })
    }

    fn base_tokens(&self) -> Vec<String> {
        let mut out = Vec::new();
        for g in &self.base {
            push_given(&mut out, g);
        }
        out
    }

    /// The choice with every dimension in `dims` at its strongest (last) alternative.
    pub fn strong(&self, dims: &[usize]) -> Choice {
        dims.iter()
            .map(|d| (*d, self.dims[*d].alternatives() - 1))
            .collect()
    }

    /// A choice as words: `--disable-dynamic-vram, without --highvram`.
    pub fn describe(&self, choice: &[(usize, usize)]) -> Vec<String> {
        choice
            .iter()
            .map(|(d, a)| self.dims[*d].describe(*a))
            .collect()
    }
}

/// A user's flag as typed (`--x=value` stays one word).
fn push_given(out: &mut Vec<String>, g: &Given) {
    out.push(g.typed.clone());
    if !g.typed.contains('=') {
        out.extend(g.values.iter().cloned());
    }
}

/// The base flags the bisect may try removing: those that touch memory.
fn is_removable(flag: &str) -> bool {
    crate::flags::defs::lookup(flag).is_some()
}

/// Orders values numerically when they are numbers (`1 < 2 < 10`), else as given.
fn sort_values(values: &mut [Option<String>]) {
    if values
        .iter()
        .all(|v| v.as_deref().is_some_and(|s| s.parse::<f64>().is_ok()))
    {
        values.sort_by(|a, b| {
            let a: f64 = a.as_deref().unwrap_or("0").parse().unwrap_or(0.0);
            let b: f64 = b.as_deref().unwrap_or("0").parse().unwrap_or(0.0);
            a.total_cmp(&b)
        });
    }
}

/// The space of `toggles` over `base`, with the built-in flag table on Linux.
#[cfg(test)]
pub(super) fn for_tests(base: &[&str], toggles: &[&str]) -> Space {
    let p = crate::flags::profile::builtin(None);
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    Space::new(
        &p.flags,
        Some(p.version),
        Context::new(crate::flags::decide::Platform::Linux),
        &s(base),
        &s(toggles),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::decide::Platform;
    use crate::flags::profile;

    use super::for_tests as space;

    #[test]
    fn values_of_one_flag_are_one_ordered_dimension() {
        let sp = space(
            &[],
            &[
                "--reserve-vram=4",
                "--reserve-vram=1",
                "--reserve-vram=2",
                "--disable-pinned-memory",
            ],
        );
        assert_eq!(sp.dims.len(), 2);
        assert_eq!(
            sp.dims[0],
            Dim::Add {
                flag: "--reserve-vram".into(),
                values: vec![Some("1".into()), Some("2".into()), Some("4".into())]
            }
        );
        let c = sp.config(&sp.strong(&[0])).unwrap();
        assert_eq!(c.flags, ["--reserve-vram", "4"]);
    }

    #[test]
    fn unknown_and_duplicate_toggles_are_skipped_with_a_reason() {
        let v = Version::lit("0.3.64");
        let p = profile::builtin(Some(&v));
        let sp = Space::new(
            &p.flags,
            Some(v),
            Context::new(Platform::Linux),
            &["--cpu".into()],
            &[
                "--disable-dynamic-vram".into(),
                "--cpu".into(),
                "--cache-none".into(),
            ],
        );
        assert_eq!(sp.skipped.len(), 2);
        assert!(
            sp.skipped[0].reason.contains("arrived in 0.15.0"),
            "{:?}",
            sp.skipped
        );
        assert!(sp.skipped[1].reason.contains("already among your flags"));
        assert_eq!(sp.dims.len(), 2, "--cache-none, and removing --cpu");
    }

    #[test]
    fn base_flags_become_removals() {
        let sp = space(
            &["--highvram", "--listen", "0.0.0.0"],
            &["--disable-pinned-memory"],
        );
        assert_eq!(
            sp.dims[1],
            Dim::Remove {
                flag: "--highvram".into(),
                values: vec![]
            }
        );
        let c = sp.config(&[(1, 0)]).unwrap();
        assert_eq!(c.flags, ["--listen", "0.0.0.0"]);
        assert_eq!(sp.describe(&[(1, 0)]), ["without --highvram"]);
    }

    #[test]
    fn invalid_combinations_are_refused() {
        let sp = space(&["--highvram"], &["--lowvram"]);
        // Adding --lowvram to --highvram: argparse would exit 2.
        assert!(sp.config(&[(0, 0)]).is_none());
        // With --highvram removed it is fine.
        assert!(sp.config(&[(0, 0), (1, 0)]).is_some());
    }

    #[test]
    fn hardware_dependent_no_ops_are_not_merged() {
        // --lowvram does nothing under Dynamic VRAM, but the hardware may have it off.
        let sp = space(&["--lowvram"], &[]);
        let without = sp.config(&[(0, 0)]).unwrap();
        assert_ne!(without.key, sp.baseline().key);
    }

    #[test]
    fn predicted_no_ops_are_not_merged_only_what_argparse_makes_the_same() {
        // The model calls --disable-nvml-pressure a no-op without Dynamic VRAM; a real
        // ComfyUI may disagree, so both run.
        let sp = space(&[], &["--disable-dynamic-vram", "--disable-nvml-pressure"]);
        let off = sp.config(&[(0, 0)]).unwrap();
        let off_and_noop = sp.config(&[(0, 0), (1, 0)]).unwrap();
        assert_ne!(off.key, off_and_noop.key);
        // Under --cpu the model predicts no GPU at all; --reserve-vram still runs apart.
        let sp = space(&["--cpu"], &["--reserve-vram=2", "--async-offload"]);
        assert_ne!(sp.config(&[(0, 0)]).unwrap().key, sp.baseline().key);
        assert_ne!(sp.config(&[(1, 0)]).unwrap().key, sp.baseline().key);
        // What argparse reads the same is one configuration: an abbreviation, a repeat.
        let sp = space(&["--disable-dynamic"], &["--disable-dynamic-vram"]);
        assert!(
            sp.skipped
                .iter()
                .any(|s| s.toggle == "--disable-dynamic-vram")
        );
        let sp = space(&["--reserve-vram", "2", "--reserve-vram", "2"], &[]);
        assert_eq!(sp.baseline().key, "--reserve-vram=2");
    }
}
