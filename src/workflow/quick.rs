//! Shortened runs: a copy of an API prompt whose sampling steps are cut to a few, everything
//! else exactly as the user has it (`--quick`).
//!
//! What shapes memory (the models and their precision, resolution, frames, batch, tiling,
//! the flags) does not depend on the step count: each step runs the same models on the same
//! latent. Only nodes whose definitions were read are touched ([`KNOWN`]); a node that is not
//! known is left as it is. Split sampling keeps every stage running at least one step, in
//! the same order and proportions: two `KSamplerAdvanced` with `start_at_step`/`end_at_step`
//! windows of one schedule (the Wan 2.2 high/low-noise split), or `SplitSigmas` on a
//! scheduler's sigmas.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The steps of `--quick auto`.
pub(crate) const AUTO_STEPS: u32 = 2;

/// `--quick auto` leaves a workflow in full when its sampling has fewer steps than this many
/// times [`AUTO_STEPS`]: a shortened run would save too little to pay for the run that checks
/// it fails as the full one does.
pub(crate) const AUTO_MIN_RATIO: u32 = 3;

/// `--quick auto|off|STEPS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quick {
    Auto,
    Off,
    Steps(u32),
}

impl Quick {
    /// `auto`, `off`, or a step count of at least 1.
    pub fn parse(s: &str) -> Result<Quick, String> {
        match s {
            "auto" => Ok(Quick::Auto),
            "off" => Ok(Quick::Off),
            n => match n.parse::<u32>() {
                Ok(0) | Err(_) => Err(format!(
                    "'{s}' is not auto, off or a number of steps (1 or more)"
                )),
                Ok(n) => Ok(Quick::Steps(n)),
            },
        }
    }

    /// The steps a shortened run samples, or `None` when runs are full.
    pub fn steps(self) -> Option<u32> {
        match self {
            Quick::Auto => Some(AUTO_STEPS),
            Quick::Off => None,
            Quick::Steps(n) => Some(n),
        }
    }
}

impl std::fmt::Display for Quick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Quick::Auto => write!(f, "auto"),
            Quick::Off => write!(f, "off"),
            Quick::Steps(n) => write!(f, "{n}"),
        }
    }
}

/// What a node's inputs mean for shortening.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A step count (a sampler's, or a scheduler's that builds sigmas), at least `min`.
    Steps { steps: &'static str, min: u64 },
    /// A step count and a window of it: the steps from `start` up to `end` run (an `end`
    /// past the count means "to the end").
    Window {
        steps: &'static str,
        start: &'static str,
        end: &'static str,
    },
    /// An index into the sigmas of the node feeding `sigmas` (`SplitSigmas`).
    Split { step: &'static str },
}

/// The nodes this module knows, each read in its definition and source: ComfyUI's
/// `nodes.py` and `comfy_extras/` (0.3.64 and current), and the video node packs' samplers.
const KNOWN: &[(&str, Role)] = &[
    (
        "KSampler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "KSamplerAdvanced",
        Role::Window {
            steps: "steps",
            start: "start_at_step",
            end: "end_at_step",
        },
    ),
    (
        "BasicScheduler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "KarrasScheduler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "ExponentialScheduler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "PolyexponentialScheduler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "LaplaceScheduler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "VPScheduler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "BetaSamplingScheduler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "SDTurboScheduler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "AlignYourStepsScheduler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "GITSScheduler",
        Role::Steps {
            steps: "steps",
            min: 2,
        },
    ),
    (
        "OptimalStepsScheduler",
        Role::Steps {
            steps: "steps",
            min: 3,
        },
    ),
    (
        "LTXVScheduler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    ("SplitSigmas", Role::Split { step: "step" }),
    // kijai/ComfyUI-WanVideoWrapper (nodes_sampler.py, wanvideo/schedulers): `start_step`
    // inclusive, `end_step` exclusive, -1 to the end; a wired `sigmas` overrides `steps`.
    (
        "WanVideoSampler",
        Role::Window {
            steps: "steps",
            start: "start_step",
            end: "end_step",
        },
    ),
    (
        "WanVideoSamplerSettings",
        Role::Window {
            steps: "steps",
            start: "start_step",
            end: "end_step",
        },
    ),
    (
        "WanVideoScheduler",
        Role::Window {
            steps: "steps",
            start: "start_step",
            end: "end_step",
        },
    ),
    (
        "WanVideoSchedulerv2",
        Role::Window {
            steps: "steps",
            start: "start_step",
            end: "end_step",
        },
    ),
    (
        "WanVideoDiffusionForcingSampler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    // kijai/ComfyUI-HunyuanVideoWrapper, ComfyUI-CogVideoXWrapper, ComfyUI-FramePackWrapper:
    // `steps` is the pipeline's num_inference_steps.
    (
        "HyVideoSampler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "HyVideoPromptMixSampler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "CogVideoSampler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "FramePackSampler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
    (
        "FramePackSingleFrameSampler",
        Role::Steps {
            steps: "steps",
            min: 1,
        },
    ),
];

fn role(class: &str) -> Option<Role> {
    KNOWN.iter().find(|(c, _)| *c == class).map(|(_, r)| *r)
}

/// One input changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub node: String,
    pub class: String,
    pub input: String,
    pub from: u64,
    pub to: u64,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node {} ({}) {} {} → {}",
            self.node, self.class, self.input, self.from, self.to
        )
    }
}

/// A shortened prompt and what was changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Shortened {
    pub prompt: Map<String, Value>,
    pub changes: Vec<Change>,
    /// Nodes with steps left as they are, and why ("node 12 (WanVideoSampler): not a node
    /// vrambisect knows").
    pub left: Vec<String>,
    /// The most sampling steps of the full prompt and of the shortened one.
    pub full_steps: u64,
    pub quick_steps: u64,
}

/// Why a prompt runs in full.
pub(crate) type Unshortened = String;

/// The prompt with its sampling cut to about `steps` steps per schedule (more where split
/// stages need one step each, or a node's own minimum); why not, when nothing can be cut.
pub(crate) fn shorten(prompt: &Map<String, Value>, steps: u32) -> Result<Shortened, Unshortened> {
    let q = u64::from(steps.max(1));
    let mut out = prompt.clone();
    let mut changes: Vec<Change> = Vec::new();
    let mut left: Vec<String> = Vec::new();
    let mut full_steps = 0u64;
    let class_of = |id: &str| class_of(prompt, id);
    let input = |id: &str, name: &str| input(prompt, id, name);
    let literal = |id: &str, name: &str| input(id, name).and_then(Value::as_u64);
    // Where a step count lives: in the node, or in the `PrimitiveInt` it is wired to.
    let source = |id: &str, name: &str| step_source(prompt, id, name);

    let splits = splits_of(prompt)?;

    // Windows of one schedule, grouped by their step count; the schedules left as they are.
    let mut windows: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut blocked: std::collections::BTreeSet<u64> = Default::default();
    for (id, node) in prompt {
        let class = node.get("class_type").and_then(Value::as_str).unwrap_or("");
        let role = match role(class) {
            // A wired `sigmas` input overrides the node's own steps (WanVideoSampler).
            Some(Role::Steps { steps, .. } | Role::Window { steps, .. })
                if input(id, "sigmas").is_some_and(Value::is_array) =>
            {
                left.push(format!(
                    "node {id} ({class}): its {steps} come from its sigmas input"
                ));
                continue;
            }
            r => r,
        };
        match role {
            Some(Role::Steps { steps: name, min }) => {
                let Some((at, input_name, s)) = source(id, name) else {
                    left.push(format!(
                        "node {id} ({class}): its {name} come from another node"
                    ));
                    continue;
                };
                full_steps = full_steps.max(s);
                let cuts: Vec<(String, u64)> = splits
                    .get(id)
                    .map(|ids| {
                        ids.iter()
                            .map(|sid| (sid.clone(), literal(sid, "step").unwrap_or(0)))
                            .collect()
                    })
                    .unwrap_or_default();
                let bounds: Vec<u64> = cuts.iter().map(|(_, k)| *k).collect();
                let plan = Plan::new(s, &bounds, q.max(min));
                if plan.to >= s {
                    continue;
                }
                let at_class = class_of(&at).unwrap_or(class).to_string();
                set(
                    &mut out,
                    &at,
                    &input_name,
                    s,
                    plan.to,
                    &at_class,
                    &mut changes,
                );
                for (sid, k) in cuts {
                    let to = plan.map(k);
                    set(&mut out, &sid, "step", k, to, "SplitSigmas", &mut changes);
                }
            }
            Some(Role::Window {
                steps: name,
                start,
                end,
            }) => match source(id, name) {
                Some((_, _, s)) => {
                    // A window bound wired from another node cannot be moved with the steps:
                    // the whole schedule stays as it is.
                    if let Some(b) = [start, end]
                        .into_iter()
                        .find(|b| input(id, b).is_some_and(Value::is_array))
                    {
                        left.push(format!(
                            "node {id} ({class}): its {b} comes from another node"
                        ));
                        blocked.insert(s);
                    }
                    windows.entry(s).or_default().push(id.clone())
                }
                None => left.push(format!(
                    "node {id} ({class}): its {name} come from another node"
                )),
            },
            Some(Role::Split { .. }) => {}
            None => {
                if input(id, "steps").is_some_and(Value::is_u64) {
                    left.push(format!(
                        "node {id} ({class}): not a sampler vrambisect knows"
                    ));
                }
            }
        }
    }
    for (s, ids) in windows {
        full_steps = full_steps.max(s);
        if !blocked.contains(&s) {
            shorten_windows(prompt, s, &ids, q, &mut out, &mut changes);
        }
    }
    if changes.is_empty() {
        return Err(if !left.is_empty() {
            format!("no sampling step it can shorten ({})", left.join("; "))
        } else if full_steps > 0 {
            format!("its sampling has {full_steps} steps, already few")
        } else {
            "it has no sampler vrambisect knows how to shorten".into()
        });
    }
    let quick_steps = changes
        .iter()
        .filter(|c| matches!(c.input.as_str(), "steps" | "value"))
        .map(|c| c.to)
        .max()
        .unwrap_or(0);
    changes.sort_by(|a, b| (node_order(&a.node), &a.input).cmp(&(node_order(&b.node), &b.input)));
    Ok(Shortened {
        prompt: out,
        changes,
        left,
        full_steps,
        quick_steps,
    })
}

/// The shortened prompt `--quick` asks for, or why the run stays full (`off`; with `auto`, a
/// workflow whose sampling is already short).
pub(crate) fn for_mode(
    prompt: &Map<String, Value>,
    quick: Quick,
) -> Result<Shortened, Unshortened> {
    let Some(steps) = quick.steps() else {
        return Err("--quick off".into());
    };
    let s = shorten(prompt, steps)?;
    if quick == Quick::Auto && s.full_steps < u64::from(AUTO_STEPS * AUTO_MIN_RATIO) {
        return Err(format!(
            "its sampling has only {} steps, too few to shorten",
            s.full_steps
        ));
    }
    Ok(s)
}

/// Cuts one schedule of `s` steps shared by window nodes (`KSamplerAdvanced` stages): every
/// stage keeps a step, in order and proportion.
fn shorten_windows(
    prompt: &Map<String, Value>,
    s: u64,
    ids: &[String],
    q: u64,
    out: &mut Map<String, Value>,
    changes: &mut Vec<Change>,
) {
    let class_of = |id: &str| class_of(prompt, id);
    let literal = |id: &str, name: &str| input(prompt, id, name).and_then(Value::as_u64);
    let mut bounds = Vec::new();
    for id in ids {
        let Some(Role::Window { start, end, .. }) = class_of(id).and_then(role) else {
            continue;
        };
        bounds.extend(literal(id, start));
        bounds.extend(literal(id, end));
    }
    let plan = Plan::new(s, &bounds, q);
    if plan.to >= s {
        return;
    }
    for id in ids {
        let class = class_of(id).unwrap_or("").to_string();
        let Some(Role::Window { steps, start, end }) = role(&class) else {
            continue;
        };
        if let Some((at, input_name, _)) = step_source(prompt, id, steps) {
            let at_class = class_of(&at).unwrap_or(&class).to_string();
            set(out, &at, &input_name, s, plan.to, &at_class, changes);
        }
        for name in [start, end] {
            if let Some(v) = literal(id, name)
                && v <= s
            {
                set(out, id, name, v, plan.map(v), &class, changes);
            }
        }
    }
}

/// The `SplitSigmas` of each scheduler (scheduler id → split node ids); an error naming a
/// split this module cannot follow to a scheduler it knows.
fn splits_of(prompt: &Map<String, Value>) -> Result<BTreeMap<String, Vec<String>>, Unshortened> {
    let class_of = |id: &str| class_of(prompt, id);
    let input = |id: &str, name: &str| input(prompt, id, name);
    let literal = |id: &str, name: &str| input(id, name).and_then(Value::as_u64);
    let mut splits: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, node) in prompt {
        let class = node.get("class_type").and_then(Value::as_str).unwrap_or("");
        if let Some(Role::Split { step }) = role(class) {
            let source = input(id, "sigmas")
                .and_then(Value::as_array)
                .and_then(|l| l.first())
                .and_then(Value::as_str);
            let feeds = source.and_then(|s| class_of(s).map(|c| (s, c)));
            match feeds {
                Some((s, c)) if matches!(role(c), Some(Role::Steps { .. })) => {
                    if literal(id, step).is_none() {
                        return Err(format!(
                            "node {id} ({class}) takes its {step} from another node"
                        ));
                    }
                    splits.entry(s.to_string()).or_default().push(id.clone());
                }
                _ => {
                    return Err(format!(
                        "node {id} ({class}) splits sigmas that do not come straight from a scheduler vrambisect knows"
                    ));
                }
            }
        }
    }

    Ok(splits)
}

/// A node's class in the prompt.
fn class_of<'a>(prompt: &'a Map<String, Value>, id: &str) -> Option<&'a str> {
    prompt
        .get(id)
        .and_then(|n| n.get("class_type"))
        .and_then(Value::as_str)
}

/// A node's input in the prompt (a value, or a link `[node, slot]`).
fn input<'a>(prompt: &'a Map<String, Value>, id: &str, name: &str) -> Option<&'a Value> {
    prompt
        .get(id)
        .and_then(|n| n.get("inputs"))
        .and_then(|i| i.get(name))
}

/// Node ids in number order where they are numbers ("3" before "10").
fn node_order(id: &str) -> (u64, String) {
    (id.parse().unwrap_or(u64::MAX), id.to_string())
}

/// Where the step count `name` of node `id` lives, and its value: the node's own input, or
/// the `PrimitiveInt` it is wired to (ComfyUI's templates share one "Steps" primitive among
/// their samplers) when that primitive feeds nothing but step counts of known nodes.
fn step_source(prompt: &Map<String, Value>, id: &str, name: &str) -> Option<(String, String, u64)> {
    let input = prompt.get(id)?.get("inputs")?.get(name)?;
    if let Some(v) = input.as_u64() {
        return Some((id.to_string(), name.to_string(), v));
    }
    let from = input.as_array()?.first()?.as_str()?;
    let primitive = prompt.get(from)?;
    if primitive.get("class_type")?.as_str()? != "PrimitiveInt" {
        return None;
    }
    let value = primitive.get("inputs")?.get("value")?.as_u64()?;
    // Its consumers must take one plan: windows of one schedule, or step counts with the same
    // least value and no split of their sigmas (else one would get another's plan).
    let consumers: Vec<(&String, Role)> = prompt
        .iter()
        .filter_map(|(cid, node)| {
            let r = node
                .get("class_type")
                .and_then(Value::as_str)
                .and_then(role)?;
            let wired = node
                .get("inputs")
                .and_then(Value::as_object)?
                .values()
                .any(|v| {
                    v.as_array().and_then(|l| l.first()).and_then(Value::as_str) == Some(from)
                });
            wired.then_some((cid, r))
        })
        .collect();
    let split_of = |cid: &str| {
        prompt.values().any(|n| {
            n.get("class_type").and_then(Value::as_str) == Some("SplitSigmas")
                && n.get("inputs")
                    .and_then(|i| i.get("sigmas"))
                    .and_then(Value::as_array)
                    .and_then(|l| l.first())
                    .and_then(Value::as_str)
                    == Some(cid)
        })
    };
    let one_plan = consumers.len() <= 1
        || consumers.iter().all(|(_, r)| matches!(r, Role::Window { .. }))
        || consumers.iter().all(|(cid, r)| {
            matches!(r, Role::Steps { min, .. } if Some(*min) == consumers.iter().find_map(|(_, r0)| match r0 { Role::Steps { min, .. } => Some(*min), _ => None }))
                && !split_of(cid)
        });
    if !one_plan {
        return None;
    }
    let only_steps = prompt.values().all(|node| {
        let steps_name = match node
            .get("class_type")
            .and_then(Value::as_str)
            .and_then(role)
        {
            Some(Role::Steps { steps, .. } | Role::Window { steps, .. }) => Some(steps),
            _ => None,
        };
        node.get("inputs")
            .and_then(Value::as_object)
            .is_none_or(|inputs| {
                inputs.iter().all(|(k, v)| {
                    let wired_here =
                        v.as_array().and_then(|l| l.first()).and_then(Value::as_str) == Some(from);
                    !wired_here || Some(k.as_str()) == steps_name
                })
            })
    });
    only_steps.then(|| (from.to_string(), "value".to_string(), value))
}

fn set(
    out: &mut Map<String, Value>,
    id: &str,
    name: &str,
    from: u64,
    to: u64,
    class: &str,
    changes: &mut Vec<Change>,
) {
    // A primitive shared by several samplers is changed once.
    if from == to || changes.iter().any(|c| c.node == id && c.input == name) {
        return;
    }
    if let Some(inputs) = out
        .get_mut(id)
        .and_then(|n| n.get_mut("inputs"))
        .and_then(Value::as_object_mut)
    {
        inputs.insert(name.to_string(), Value::from(to));
        changes.push(Change {
            node: id.to_string(),
            class: class.to_string(),
            input: name.to_string(),
            from,
            to,
        });
    }
}

/// How one schedule of `from` steps, cut into stages at `bounds`, becomes `to` steps: every
/// stage keeps at least one step, the stages keep their order and (as near as whole steps
/// allow) their proportions.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    from: u64,
    to: u64,
    /// The stage boundaries of the full schedule (0 and `from` included) and where each goes.
    map: Vec<(u64, u64)>,
}

impl Plan {
    fn new(from: u64, bounds: &[u64], steps: u64) -> Plan {
        let mut cuts: Vec<u64> = bounds
            .iter()
            .copied()
            .filter(|b| *b > 0 && *b < from)
            .collect();
        cuts.push(0);
        cuts.push(from);
        cuts.sort_unstable();
        cuts.dedup();
        let stages = cuts.len() as u64 - 1;
        let to = steps.max(stages);
        if to >= from {
            return Plan {
                from,
                to: from,
                map: cuts.iter().map(|c| (*c, *c)).collect(),
            };
        }
        let lengths: Vec<u64> = cuts.windows(2).map(|w| w[1] - w[0]).collect();
        let ideal: Vec<f64> = lengths
            .iter()
            .map(|l| *l as f64 * to as f64 / from as f64)
            .collect();
        let mut got: Vec<u64> = ideal.iter().map(|i| (i.floor() as u64).max(1)).collect();
        while got.iter().sum::<u64>() < to {
            let j = (0..got.len())
                .max_by(|a, b| {
                    (ideal[*a] - got[*a] as f64).total_cmp(&(ideal[*b] - got[*b] as f64))
                })
                .expect("a stage");
            got[j] += 1;
        }
        while got.iter().sum::<u64>() > to {
            let j = (0..got.len())
                .filter(|j| got[*j] > 1)
                .min_by(|a, b| {
                    (ideal[*a] - got[*a] as f64).total_cmp(&(ideal[*b] - got[*b] as f64))
                })
                .expect("more steps than stages");
            got[j] -= 1;
        }
        let mut map = vec![(0, 0)];
        let mut at = 0;
        for (c, g) in cuts[1..].iter().zip(&got) {
            at += g;
            map.push((*c, at));
        }
        Plan { from, to, map }
    }

    /// Where a boundary of the full schedule goes (the end, for one at or past it).
    fn map(&self, step: u64) -> u64 {
        if step >= self.from {
            return self.to;
        }
        self.map
            .iter()
            .find(|(c, _)| *c == step)
            .map(|(_, t)| *t)
            .unwrap_or(step.min(self.to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn prompt(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn changed(s: &Shortened) -> Vec<String> {
        s.changes.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn a_ksampler_is_cut_and_nothing_else_changes() {
        let p = prompt(json!({
            "3": {"class_type": "KSampler", "inputs": {"steps": 20, "seed": 5, "cfg": 8.0, "denoise": 1.0, "model": ["4", 0]}},
            "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "a.safetensors"}},
        }));
        let s = shorten(&p, 2).unwrap();
        assert_eq!(changed(&s), ["node 3 (KSampler) steps 20 → 2"]);
        let mut back = s.prompt.clone();
        back["3"]["inputs"]["steps"] = json!(20);
        assert_eq!(back, p);
        assert_eq!((s.full_steps, s.quick_steps), (20, 2));
    }

    #[test]
    fn the_wan_high_low_split_keeps_both_stages_in_order() {
        // Wan 2.2 14B: high noise steps 0-10, low noise 10-end, of 20.
        let p = prompt(json!({
            "57": {"class_type": "KSamplerAdvanced", "inputs": {"steps": 20, "start_at_step": 0, "end_at_step": 10}},
            "58": {"class_type": "KSamplerAdvanced", "inputs": {"steps": 20, "start_at_step": 10, "end_at_step": 10000}},
        }));
        let s = shorten(&p, 2).unwrap();
        assert_eq!(
            changed(&s),
            [
                "node 57 (KSamplerAdvanced) end_at_step 10 → 1",
                "node 57 (KSamplerAdvanced) steps 20 → 2",
                "node 58 (KSamplerAdvanced) start_at_step 10 → 1",
                "node 58 (KSamplerAdvanced) steps 20 → 2",
            ]
        );
        // 10000 means "to the end": left as it is.
        assert_eq!(s.prompt["58"]["inputs"]["end_at_step"], 10000);
    }

    #[test]
    fn three_stages_get_a_step_each_even_below_the_steps_asked() {
        let p = prompt(json!({
            "1": {"class_type": "KSamplerAdvanced", "inputs": {"steps": 30, "start_at_step": 0, "end_at_step": 4}},
            "2": {"class_type": "KSamplerAdvanced", "inputs": {"steps": 30, "start_at_step": 4, "end_at_step": 20}},
            "3": {"class_type": "KSamplerAdvanced", "inputs": {"steps": 30, "start_at_step": 20, "end_at_step": 30}},
        }));
        let s = shorten(&p, 2).unwrap();
        let v = |id: &str, k: &str| s.prompt[id]["inputs"][k].as_u64().unwrap();
        assert_eq!(v("1", "steps"), 3);
        assert_eq!((v("1", "start_at_step"), v("1", "end_at_step")), (0, 1));
        assert_eq!((v("2", "start_at_step"), v("2", "end_at_step")), (1, 2));
        assert_eq!((v("3", "start_at_step"), v("3", "end_at_step")), (2, 3));
        // Proportions where whole steps allow: 6 of 30 steps, stages 4 / 16 / 10.
        let s = shorten(&p, 6).unwrap();
        let v = |id: &str, k: &str| s.prompt[id]["inputs"][k].as_u64().unwrap();
        assert_eq!((v("2", "start_at_step"), v("2", "end_at_step")), (1, 4));
    }

    #[test]
    fn split_sigmas_follow_their_scheduler() {
        let p = prompt(json!({
            "10": {"class_type": "BasicScheduler", "inputs": {"steps": 20, "scheduler": "simple", "denoise": 1.0, "model": ["1", 0]}},
            "11": {"class_type": "SplitSigmas", "inputs": {"sigmas": ["10", 0], "step": 10}},
            "12": {"class_type": "SamplerCustomAdvanced", "inputs": {"sigmas": ["11", 0]}},
            "13": {"class_type": "SamplerCustomAdvanced", "inputs": {"sigmas": ["11", 1]}},
        }));
        let s = shorten(&p, 2).unwrap();
        assert_eq!(
            changed(&s),
            [
                "node 10 (BasicScheduler) steps 20 → 2",
                "node 11 (SplitSigmas) step 10 → 1"
            ]
        );
        // A split of a split is not followed: the workflow runs in full.
        let mut chained = p.clone();
        chained.insert(
            "14".into(),
            json!({"class_type": "SplitSigmas", "inputs": {"sigmas": ["11", 1], "step": 2}}),
        );
        assert!(
            shorten(&chained, 2)
                .unwrap_err()
                .contains("node 14 (SplitSigmas)")
        );
    }

    #[test]
    fn a_nodes_own_minimum_is_kept() {
        let p = prompt(json!({
            "1": {"class_type": "OptimalStepsScheduler", "inputs": {"steps": 20, "model_type": "FLUX", "denoise": 1.0}},
        }));
        assert_eq!(
            changed(&shorten(&p, 2).unwrap()),
            ["node 1 (OptimalStepsScheduler) steps 20 → 3"]
        );
    }

    #[test]
    fn what_cannot_be_shortened_says_why() {
        let few = prompt(json!({"3": {"class_type": "KSampler", "inputs": {"steps": 2}}}));
        assert_eq!(
            shorten(&few, 2).unwrap_err(),
            "its sampling has 2 steps, already few"
        );
        let none =
            prompt(json!({"1": {"class_type": "ImageInvert", "inputs": {"image": ["2", 0]}}}));
        assert_eq!(
            shorten(&none, 2).unwrap_err(),
            "it has no sampler vrambisect knows how to shorten"
        );
        let unknown =
            prompt(json!({"7": {"class_type": "MysterySampler", "inputs": {"steps": 30}}}));
        assert_eq!(
            shorten(&unknown, 2).unwrap_err(),
            "no sampling step it can shorten (node 7 (MysterySampler): not a sampler vrambisect knows)"
        );
        // A known node beside an unknown one: the known is cut, the unknown named.
        let mut both = unknown.clone();
        both.insert(
            "3".into(),
            json!({"class_type": "KSampler", "inputs": {"steps": 30}}),
        );
        let s = shorten(&both, 2).unwrap();
        assert_eq!(
            s.left,
            ["node 7 (MysterySampler): not a sampler vrambisect knows"]
        );
        // Steps from another node (a primitive) are left as they are.
        let linked =
            prompt(json!({"3": {"class_type": "KSampler", "inputs": {"steps": ["9", 0]}}}));
        assert!(
            shorten(&linked, 2)
                .unwrap_err()
                .contains("come from another node")
        );
    }

    /// Every recorded frontend prompt (`fixtures/ui-workflows`): the shortened one differs
    /// from it only in step inputs, every sampler stage keeps at least a step, and every
    /// prompt with a sampler is shortened. With `VRAMBISECT_QUICK_OUT` set, the shortened
    /// prompts are written there (`scripts/check-quick-real.py` queues them on a real ComfyUI).
    #[test]
    fn the_recorded_prompts_change_only_in_their_steps() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/ui-workflows/pairs");
        let out = std::env::var_os("VRAMBISECT_QUICK_OUT").map(std::path::PathBuf::from);
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".api.json"))
            .collect();
        names.sort();
        assert_eq!(names.len(), 115);
        let mut shortened = 0;
        for name in &names {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            let full = prompt(serde_json::from_str(&text).unwrap());
            let has_sampler = full.values().any(|n| {
                matches!(
                    n["class_type"].as_str(),
                    Some("KSampler" | "KSamplerAdvanced" | "BasicScheduler")
                )
            });
            let s = match shorten(&full, AUTO_STEPS) {
                Ok(s) => s,
                Err(why) => {
                    assert!(!has_sampler || why.contains("already few"), "{name}: {why}");
                    continue;
                }
            };
            shortened += 1;
            for (id, node) in &full {
                let quick = &s.prompt[id];
                assert_eq!(quick["class_type"], node["class_type"], "{name} {id}");
                let (a, b) = (
                    node["inputs"].as_object().unwrap(),
                    quick["inputs"].as_object().unwrap(),
                );
                assert_eq!(
                    a.keys().collect::<Vec<_>>(),
                    b.keys().collect::<Vec<_>>(),
                    "{name} {id}"
                );
                for (k, v) in a {
                    if v != &b[k] {
                        assert!(
                            ["steps", "start_at_step", "end_at_step", "step", "value"]
                                .contains(&k.as_str()),
                            "{name}: node {id} input {k} changed"
                        );
                        assert!(
                            b[k].as_u64().unwrap() < v.as_u64().unwrap(),
                            "{name} {id} {k}"
                        );
                    }
                }
                if let (Some(start), Some(end), Some(steps)) = (
                    b.get("start_at_step").and_then(Value::as_u64),
                    b.get("end_at_step").and_then(Value::as_u64),
                    b.get("steps").and_then(Value::as_u64),
                ) && start < a["steps"].as_u64().unwrap()
                {
                    assert!(end.min(steps) > start, "{name} {id}: an empty stage");
                }
            }
            assert_eq!(s.prompt.len(), full.len());
            if let Some(out) = &out {
                std::fs::create_dir_all(out).unwrap();
                let text = serde_json::to_string_pretty(&Value::Object(s.prompt.clone())).unwrap();
                std::fs::write(out.join(name), text).unwrap();
            }
        }
        // The other 19 have no sampler (image edits, 3D, API nodes, reroutes, primitives).
        assert_eq!(shortened, 96);
    }

    #[test]
    fn a_steps_primitive_shared_by_samplers_is_cut_once() {
        // As ComfyUI's Wan 2.2 S2V template wires it.
        let p = prompt(json!({
            "103": {"class_type": "PrimitiveInt", "inputs": {"value": 20}},
            "3": {"class_type": "KSampler", "inputs": {"steps": ["103", 0]}},
            "79:77": {"class_type": "KSampler", "inputs": {"steps": ["103", 0]}},
        }));
        assert_eq!(
            changed(&shorten(&p, 2).unwrap()),
            ["node 103 (PrimitiveInt) value 20 → 2"]
        );
        // A primitive that also sets something else (a length) is left as it is.
        let mut shared = p.clone();
        shared.insert(
            "50".into(),
            json!({"class_type": "WanSoundImageToVideo", "inputs": {"length": ["103", 0]}}),
        );
        assert!(shorten(&shared, 2).is_err());
    }

    #[test]
    fn a_window_bound_from_another_node_leaves_its_schedule_in_full() {
        // A community Wan 2.2 pattern: the split step is a primitive of its own.
        let p = prompt(json!({
            "90": {"class_type": "PrimitiveInt", "inputs": {"value": 10}},
            "57": {"class_type": "KSamplerAdvanced", "inputs": {"steps": 20, "start_at_step": 0, "end_at_step": ["90", 0]}},
            "58": {"class_type": "KSamplerAdvanced", "inputs": {"steps": 20, "start_at_step": ["90", 0], "end_at_step": 10000}},
        }));
        let why = shorten(&p, 2).unwrap_err();
        assert!(
            why.contains("node 57 (KSamplerAdvanced): its end_at_step comes from another node"),
            "{why}"
        );
    }

    #[test]
    fn a_primitive_feeding_step_counts_of_different_plans_is_left_alone() {
        // A KSampler (least 1) and an OptimalStepsScheduler (least 3) on one primitive: one
        // value cannot be right for both.
        let p = prompt(json!({
            "1": {"class_type": "PrimitiveInt", "inputs": {"value": 20}},
            "2": {"class_type": "KSampler", "inputs": {"steps": ["1", 0]}},
            "3": {"class_type": "OptimalStepsScheduler", "inputs": {"steps": ["1", 0]}},
        }));
        assert!(
            shorten(&p, 2)
                .unwrap_err()
                .contains("come from another node")
        );
        // The step count of a primitive's cut is reported.
        let one = prompt(json!({
            "1": {"class_type": "PrimitiveInt", "inputs": {"value": 20}},
            "2": {"class_type": "KSampler", "inputs": {"steps": ["1", 0]}},
        }));
        assert_eq!(shorten(&one, 2).unwrap().quick_steps, 2);
    }

    #[test]
    fn quick_parses() {
        assert_eq!(Quick::parse("auto"), Ok(Quick::Auto));
        assert_eq!(Quick::parse("off"), Ok(Quick::Off));
        assert_eq!(Quick::parse("4"), Ok(Quick::Steps(4)));
        assert!(Quick::parse("0").is_err());
        assert!(Quick::parse("fast").is_err());
    }
}
