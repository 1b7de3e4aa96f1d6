//! Loading the user's workflow: the API format as it is; the UI format (what the browser
//! saves) kept to be converted once ComfyUI says which nodes it has ([`ui`]); a PNG, WebP,
//! audio or video file ComfyUI made read for the prompt inside it ([`embedded`]). JSON errors
//! are located.

pub(crate) mod embedded;
pub(crate) mod nodes;
pub(crate) mod quick;
pub(crate) mod ui;

use crate::error::{Error, Result};
use serde_json::{Map, Value};
use std::path::Path;

/// A workflow: the API prompt (`{node_id: {class_type, inputs}}`), or a UI-format one still
/// to be converted.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Workflow {
    pub prompt: Map<String, Value>,
    /// A UI-format workflow, to convert with the install's node definitions when ComfyUI is up
    /// (`prompt` is empty until then).
    pub ui: Option<Value>,
    /// Where it was found when the file was not workflow JSON: "the prompt saved inside this
    /// PNG image".
    pub origin: Option<String>,
    /// What converting a UI-format workflow did that the user should know of, a line each.
    pub warnings: Vec<String>,
}

/// A version as numbers (`1.58.1` → [1, 58, 1]).
fn version_key(v: &str) -> Vec<u32> {
    v.trim()
        .split('.')
        .map(|p| p.parse().unwrap_or(0))
        .collect()
}

/// The node ids two prompts queue differently (`_meta` aside), at most eight named.
fn differing_nodes(a: &Map<String, Value>, b: &Map<String, Value>) -> Vec<String> {
    let strip = |n: &Value| {
        let mut n = n.clone();
        if let Some(o) = n.as_object_mut() {
            o.remove("_meta");
        }
        n
    };
    let mut ids: Vec<&String> = a.keys().chain(b.keys()).collect();
    ids.sort();
    ids.dedup();
    let mut out: Vec<String> = ids
        .into_iter()
        .filter(|id| a.get(*id).map(strip) != b.get(*id).map(strip))
        .map(|id| id.to_string())
        .collect();
    if out.len() > 8 {
        let more = out.len() - 8;
        out.truncate(8);
        out.push(format!("and {more} more"));
    }
    out
}

/// The largest media file searched for a prompt.
const MAX_MEDIA: u64 = 512 << 20;

/// How iterations are kept from being served out of ComfyUI's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheBust {
    /// The first iteration, or only one: nothing to do.
    None,
    /// Every `seed`/`noise_seed` input was changed.
    Seed,
    /// No seed inputs: ComfyUI's cache was emptied with `POST /free` before the prompt.
    Free,
}

const SEED_INPUTS: &[&str] = &["seed", "noise_seed"];

impl Workflow {
    /// Reads and checks a workflow file: workflow JSON (API or UI format), or an output of
    /// ComfyUI with the prompt inside.
    pub fn load(path: &Path) -> Result<Workflow> {
        let head = crate::input_file::head(path, "workflow", 16)?;
        if let Some(kind) = embedded::media_kind(&head) {
            let bytes = crate::input_file::read(path, "workflow", MAX_MEDIA)?;
            return Workflow::from_media(path, kind, &bytes);
        }
        let bytes = crate::input_file::read(path, "workflow", crate::input_file::MAX_WORKFLOW)?;
        let text = crate::input_file::decode(&bytes);
        Workflow::parse(&text).map_err(|e| {
            Error::usage(format!("workflow {}: {}", path.display(), e.message)).hint(
                e.hint.unwrap_or_else(|| {
                    "give an API-format workflow (Workflow → Export (API))".into()
                }),
            )
        })
    }

    /// The prompt inside an image, audio or video file ComfyUI wrote.
    fn from_media(path: &Path, kind: &str, bytes: &[u8]) -> Result<Workflow> {
        let refuse = |what: String, hint: &str| {
            Error::usage(format!("workflow {}: {what}", path.display())).hint(hint.to_string())
        };
        if kind == "PNG image" && embedded::png_cut_short(bytes) {
            return Err(refuse(
                "the PNG image is cut short (it ends before its last chunk)".into(),
                "copy the whole file again, or give the workflow JSON (Workflow → Export (API))",
            ));
        }
        match embedded::find(bytes) {
            Some(embedded::Found::Api(v)) => {
                let text = v.to_string();
                let mut w = Workflow::parse(&text).map_err(|e| {
                    refuse(
                        format!("the prompt inside this {kind}: {}", e.message),
                        "give the workflow JSON (Workflow → Export (API))",
                    )
                })?;
                w.origin = Some(format!("the prompt saved inside this {kind}"));
                Ok(w)
            }
            Some(embedded::Found::Ui(v)) => Ok(Workflow {
                ui: Some(v),
                origin: Some(format!(
                    "the workflow saved inside this {kind} (it holds no API prompt)"
                )),
                ..Workflow::default()
            }),
            None => Err(refuse(
                format!("this {kind} holds no ComfyUI prompt"),
                "ComfyUI's save nodes keep the prompt in what they write; this file was made or saved again without it (by another program, or with --disable-metadata): give the workflow JSON (Workflow → Export (API))",
            )),
        }
    }

    /// The workflow as ComfyUI's frontend would queue it on an install with these nodes
    /// (an API workflow as it is), by the rules of the frontend it serves (`served`: its
    /// version, when known; else 1.27's). Where another frontend would queue something else
    /// and that matters (the file was saved by a newer frontend, or the one served lies
    /// between the two recorded), a warning names the nodes.
    pub fn converted(
        &self,
        defs: &nodes::NodeDefs,
        served: Option<&str>,
    ) -> std::result::Result<Workflow, ui::Refusal> {
        let Some(doc) = &self.ui else {
            return Ok(self.clone());
        };
        let frontend = served.map_or(ui::Frontend::V1_27, ui::Frontend::of_version);
        let (prompt, mut warnings) = ui::convert_for(doc, defs, frontend)?;
        let saved_by = doc
            .pointer("/extra/frontendVersion")
            .and_then(Value::as_str);
        let newer = |a: &str, b: &str| version_key(a) > version_key(b);
        // Saved by a newer frontend line than the one served: compared with what that line
        // queues; otherwise with the current line's rules (1.27's for the current line).
        let saved_newer = saved_by
            .zip(served)
            .filter(|(s, v)| newer(s, v) && ui::Frontend::of_version(s) != frontend);
        let other = saved_newer.map_or(frontend.other(), |(s, _)| ui::Frontend::of_version(s));
        let unrecorded = served.is_none_or(|v| !ui::Frontend::recorded(v));
        if (saved_newer.is_some() || unrecorded)
            && let Ok((alt, _)) = ui::convert_for(doc, defs, other)
        {
            let differ = differing_nodes(&prompt, &alt);
            if !differ.is_empty() {
                let nodes = differ.join(", ");
                warnings.push(match (saved_newer, served) {
                    (Some((saved, served)), _) => format!(
                        "saved by frontend {saved}, newer than the {served} this ComfyUI serves: converted as {served} queues it; newer frontends queue nodes {nodes} otherwise"
                    ),
                    (None, Some(v)) => format!(
                        "this ComfyUI serves frontend {v}, whose rules were measured on the workflows that tell them apart but not recorded with all of them (1.27.10, 1.42.10 and 1.58.1 were): converted by its rules; by the {} rules, nodes {nodes} would be queued otherwise",
                        other.name()
                    ),
                    (None, None) => format!(
                        "which frontend this ComfyUI serves is not known: converted by the 1.27 rules; by the 1.58 rules, nodes {nodes} would be queued otherwise"
                    ),
                });
            }
        }
        Ok(Workflow {
            prompt,
            ui: None,
            origin: self.origin.clone(),
            warnings,
        })
    }

    /// Parses workflow JSON; the error says what is wrong and where.
    pub fn parse(text: &str) -> Result<Workflow> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            Error::usage(format!(
                "not valid JSON at line {}, column {}: {}",
                e.line(),
                e.column(),
                json_reason(&e)
            ))
        })?;
        let Value::Object(mut top) = value else {
            return Err(Error::usage("not a workflow: the JSON is not an object"));
        };
        if top.contains_key("nodes") && top.contains_key("links") {
            if !top.get("nodes").is_some_and(Value::is_array) {
                return Err(Error::usage(
                    "a UI-format workflow whose nodes are not a list",
                ));
            }
            // Converted when ComfyUI is up and says which nodes it has.
            return Ok(Workflow {
                ui: Some(Value::Object(top)),
                ..Workflow::default()
            });
        }
        // The body of a POST /prompt: {"prompt": {...}, "client_id": ...}.
        if let Some(Value::Object(inner)) = top.get("prompt")
            && !inner.contains_key("class_type")
        {
            top = inner.clone();
        }
        if top.is_empty() {
            return Err(Error::usage("the workflow has no nodes"));
        }
        for (id, node) in &top {
            let Some(obj) = node.as_object() else {
                return Err(Error::usage(format!(
                    "node {id:?} is not an object: not an API-format workflow"
                )));
            };
            if !obj.get("class_type").is_some_and(Value::is_string) {
                return Err(Error::usage(format!(
                    "node {id:?} has no class_type: not an API-format workflow"
                )));
            }
            if !obj.get("inputs").is_none_or(Value::is_object) {
                return Err(Error::usage(format!(
                    "node {id:?} has inputs that are not an object"
                )));
            }
        }
        Ok(Workflow {
            prompt: top,
            ..Workflow::default()
        })
    }

    /// How many nodes the workflow has.
    pub fn node_count(&self) -> usize {
        self.prompt.len()
    }

    /// The class of node `id`.
    pub fn class_of(&self, id: &str) -> Option<&str> {
        self.prompt.get(id)?.get("class_type")?.as_str()
    }

    /// Whether any node has a literal integer seed input.
    pub fn has_seed(&self) -> bool {
        self.prompt.values().any(|n| {
            n.get("inputs").and_then(Value::as_object).is_some_and(|i| {
                SEED_INPUTS
                    .iter()
                    .any(|k| i.get(*k).is_some_and(Value::is_u64))
            })
        })
    }

    /// The prompt for iteration `n` (1-based): iteration 1 is the workflow as given; later
    /// ones add `n - 1` to every literal seed so ComfyUI cannot serve them from its cache.
    pub fn for_iteration(&self, n: u32) -> (Map<String, Value>, CacheBust) {
        if n <= 1 {
            return (self.prompt.clone(), CacheBust::None);
        }
        if !self.has_seed() {
            return (self.prompt.clone(), CacheBust::Free);
        }
        let mut prompt = self.prompt.clone();
        for node in prompt.values_mut() {
            let Some(inputs) = node.get_mut("inputs").and_then(Value::as_object_mut) else {
                continue;
            };
            for key in SEED_INPUTS {
                if let Some(seed) = inputs.get(*key).and_then(Value::as_u64) {
                    inputs.insert(
                        key.to_string(),
                        Value::from(seed.wrapping_add(u64::from(n - 1))),
                    );
                }
            }
        }
        (prompt, CacheBust::Seed)
    }
}

fn json_reason(e: &serde_json::Error) -> String {
    // serde_json appends " at line X column Y"; the position is already in our message.
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const API: &str =
        include_str!("../../fixtures/captures/workflows/api/ok_empty_invert_save.json");
    const UI: &str = include_str!("../../fixtures/captures/workflows/ui/default.json");

    #[test]
    fn api_format_loads() {
        let w = Workflow::parse(API).unwrap();
        assert_eq!(w.node_count(), 3);
        assert_eq!(w.class_of("3"), Some("SaveImage"));
        assert!(!w.has_seed());
    }

    #[test]
    fn a_node_named_prompt_is_not_taken_for_a_request_body() {
        let text = r#"{"prompt": {"class_type": "EmptyImage", "inputs": {}}}"#;
        assert_eq!(
            Workflow::parse(text).unwrap().class_of("prompt"),
            Some("EmptyImage")
        );
    }

    #[test]
    fn request_body_is_unwrapped() {
        let body = format!("{{\"prompt\": {API}, \"client_id\": \"x\"}}");
        assert_eq!(Workflow::parse(&body).unwrap().node_count(), 3);
    }

    #[test]
    fn ui_format_is_kept_to_convert() {
        let w = Workflow::parse(UI).unwrap();
        assert!(w.ui.is_some());
        assert_eq!(w.node_count(), 0, "converted when ComfyUI is up");
    }

    #[test]
    fn malformed_json_has_a_position() {
        let err = Workflow::parse(
            "{\"prompt\": {\"1\": {\"class_type\": \"EmptyImage\", \"inputs\": {\"width\": 64,,}",
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "not valid JSON at line 1, column 70: key must be a string"
        );
        let err = Workflow::parse("{\n  \"1\": {\n    \"class_type\": \"X\"\n  }\n").unwrap_err();
        assert!(err.message.starts_with("not valid JSON at line 5"), "{err}");
    }

    #[test]
    fn not_a_workflow() {
        for text in [
            "[]",
            "{}",
            "{\"1\": 5}",
            "{\"1\": {\"inputs\": {}}}",
            "{\"1\": {\"class_type\": \"X\", \"inputs\": 3}}",
        ] {
            assert!(Workflow::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn seeds_change_per_iteration() {
        let w = Workflow::parse(r#"{"3": {"class_type": "KSampler", "inputs": {"seed": 42, "steps": 20}}, "9": {"class_type": "SaveImage", "inputs": {}}}"#).unwrap();
        let (first, bust) = w.for_iteration(1);
        assert_eq!(bust, CacheBust::None);
        assert_eq!(first["3"]["inputs"]["seed"], 42);
        let (third, bust) = w.for_iteration(3);
        assert_eq!(bust, CacheBust::Seed);
        assert_eq!(third["3"]["inputs"]["seed"], 44);
        assert_eq!(third["3"]["inputs"]["steps"], 20);
        let plain = Workflow::parse(API).unwrap();
        assert_eq!(plain.for_iteration(2).1, CacheBust::Free);
    }
}
