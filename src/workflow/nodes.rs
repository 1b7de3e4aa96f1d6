//! What ComfyUI's `/object_info` says about each node class, as far as converting a UI-format
//! workflow needs it: which widgets the frontend makes for the class, in order, and which of
//! them are sent to the server.

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The node classes of one install, from `/object_info`.
#[derive(Debug, Clone, Default)]
pub struct NodeDefs {
    classes: BTreeMap<String, Value>,
}

/// One widget the frontend makes for a node, in the order it makes them (the order of a
/// node's `widgets_values`).
#[derive(Debug, Clone, PartialEq)]
pub struct Widget {
    /// The input it sets (for a control widget: the name the frontend gives it).
    pub name: String,
    /// Whether its value is sent as an input (control widgets and upload buttons are not).
    pub serialized: bool,
    /// A STRING widget whose text goes through the frontend's dynamic prompts.
    pub dynamic_prompts: bool,
    /// Its value when a node has no `widgets_values` (the definition's default; a combo's
    /// first choice).
    pub default: Option<Value>,
    /// The value it always sends, whatever was saved (the audio player sends "").
    pub fixed: Option<Value>,
    /// One the frontend itself adds (the audio player, PreviewAny's text): frontend 1.27
    /// sends it, later frontends do not.
    pub frontend_only: bool,
    /// The input's type as the definition declares it (`INT`, `FLOAT`, `BOOLEAN`, `STRING`,
    /// `COMBO`); empty for the frontend's own widgets.
    pub kind: String,
}

impl Widget {
    /// A widget that takes a place in `widgets_values` but is not sent.
    fn unsent(name: &str) -> Widget {
        Widget {
            name: name.into(),
            serialized: false,
            dynamic_prompts: false,
            default: None,
            fixed: None,
            frontend_only: false,
            kind: String::new(),
        }
    }

    /// Whether `value` is of the kind this widget's input declares: a number for INT and
    /// FLOAT, text for STRING, true or false for BOOLEAN. Combos and the frontend's own
    /// widgets take anything the frontend keeps (their choices may be numbers).
    pub fn accepts(&self, value: &Value) -> bool {
        match self.kind.as_str() {
            "INT" | "FLOAT" => value.is_number(),
            "STRING" => value.is_string(),
            "BOOLEAN" => value.is_boolean(),
            _ => true,
        }
    }
}

/// The kinds of input the frontend draws as a widget.
const WIDGET_TYPES: &[&str] = &["INT", "FLOAT", "BOOLEAN", "STRING", "COMBO"];
/// Combo options for which the frontend adds an upload button at the end of the required
/// inputs (its value is kept in `widgets_values`, never sent).
const UPLOADS: &[&str] = &["image_upload", "video_upload", "animated_image_upload"];
/// Classes to which the frontend adds an audio player widget (`audioUI`) at the end of the
/// required inputs; it sends "".
const AUDIO_UI: &[&str] = &[
    "LoadAudio",
    "SaveAudio",
    "PreviewAudio",
    "SaveAudioMP3",
    "SaveAudioOpus",
];

impl NodeDefs {
    /// Reads `/object_info`'s body.
    pub fn parse(body: &Value) -> Option<NodeDefs> {
        let map = body.as_object()?;
        Some(NodeDefs {
            classes: map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        })
    }

    pub fn has(&self, class: &str) -> bool {
        self.classes.contains_key(class)
    }

    /// The widgets the frontend makes for `class`, in order; `Err` says why they cannot be
    /// known with certainty.
    pub fn widgets(&self, class: &str) -> Result<Vec<Widget>, String> {
        let def = self
            .classes
            .get(class)
            .ok_or_else(|| format!("this ComfyUI has no node class {class}"))?;
        let inputs = def.get("input").and_then(Value::as_object);
        let mut out = Vec::new();
        for group in ["required", "optional"] {
            let Some(specs) = inputs.and_then(|i| i.get(group)).and_then(Value::as_object) else {
                if group == "required" {
                    extras_of_required(class, None, &mut out);
                }
                continue;
            };
            for name in ordered_names(def, group, specs) {
                let Some(spec) = specs.get(&name) else {
                    continue;
                };
                widgets_of(&name, spec, &mut out)?;
            }
            if group == "required" {
                extras_of_required(class, Some(specs), &mut out);
            }
        }
        Ok(out)
    }

    /// The inputs the frontend gives a new node of `class`, in its order: the inputs that
    /// make no widget (sockets), then those that do, each in the declared order of the
    /// required then the optional ones; with whether each is a widget's input.
    pub fn input_layout(&self, class: &str) -> Option<Vec<(String, bool)>> {
        let def = self.classes.get(class)?;
        let inputs = def.get("input").and_then(Value::as_object);
        let mut all = Vec::new();
        for group in ["required", "optional"] {
            let Some(specs) = inputs.and_then(|i| i.get(group)).and_then(Value::as_object) else {
                continue;
            };
            for name in ordered_names(def, group, specs) {
                let Some(spec) = specs.get(&name) else {
                    continue;
                };
                let mut made = Vec::new();
                let widget = widgets_of(&name, spec, &mut made).is_ok()
                    && made.first().is_some_and(|w| w.name == name);
                all.push((name, widget));
            }
        }
        let (widgets, sockets): (Vec<_>, Vec<_>) = all.into_iter().partition(|(_, w)| *w);
        Some(sockets.into_iter().chain(widgets).collect())
    }

    /// Whether `class` declares an input `name` (required, optional or hidden).
    pub fn has_input(&self, class: &str, name: &str) -> bool {
        self.classes
            .get(class)
            .and_then(|d| d.get("input"))
            .and_then(Value::as_object)
            .is_some_and(|groups| groups.values().any(|g| g.get(name).is_some()))
    }

    /// How many outputs `class` has.
    pub fn output_count(&self, class: &str) -> usize {
        self.classes
            .get(class)
            .and_then(|d| d.get("output"))
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    }
}

/// The input names of `group` in the order the server declared them (`input_order`, which
/// ComfyUI sends because a JSON object's key order is not kept everywhere).
fn ordered_names(def: &Value, group: &str, specs: &Map<String, Value>) -> Vec<String> {
    match def
        .get("input_order")
        .and_then(|o| o.get(group))
        .and_then(Value::as_array)
    {
        Some(order) => order
            .iter()
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect(),
        None => specs.keys().cloned().collect(),
    }
}

/// The widgets one input spec makes (`[type, options]`), appended to `out`.
fn widgets_of(name: &str, spec: &Value, out: &mut Vec<Widget>) -> Result<(), String> {
    let kind = match spec.get(0) {
        Some(Value::Array(_)) => "COMBO",
        Some(Value::String(t)) => t.as_str(),
        _ => {
            return Err(format!(
                "the input {name} has a definition this tool cannot read"
            ));
        }
    };
    let options = spec.get(1).and_then(Value::as_object);
    let flag = |key: &str| {
        options
            .and_then(|o| o.get(key))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    if !WIDGET_TYPES.contains(&kind) || flag("forceInput") {
        return Ok(());
    }
    let default = options.and_then(|o| o.get("default")).cloned().or_else(|| {
        // A combo with no default starts at its first choice.
        match spec.get(0) {
            Some(Value::Array(choices)) => choices.first().cloned(),
            _ => options
                .and_then(|o| o.get("options"))
                .and_then(|c| c.get(0))
                .cloned(),
        }
    });
    out.push(Widget {
        name: name.to_string(),
        serialized: true,
        dynamic_prompts: kind == "STRING" && flag("dynamicPrompts"),
        default,
        fixed: None,
        frontend_only: false,
        kind: kind.to_string(),
    });
    let control = flag("control_after_generate")
        || (kind == "INT" && (name == "seed" || name == "noise_seed"));
    if control && (kind == "INT" || kind == "FLOAT") {
        out.push(Widget::unsent("control_after_generate"));
    } else if control && kind == "COMBO" {
        // A combo's control comes with a filter for the values it cycles through.
        out.push(Widget::unsent("control_after_generate"));
        out.push(Widget::unsent("control_filter_list"));
    }
    Ok(())
}

/// What the frontend's extensions add after the required inputs: the audio player, then an
/// upload button.
fn extras_of_required(class: &str, required: Option<&Map<String, Value>>, out: &mut Vec<Widget>) {
    if class == "PreviewAny" {
        // The text shown after a run; it sends "".
        out.push(Widget {
            name: "preview".into(),
            serialized: true,
            dynamic_prompts: false,
            default: Some(Value::String(String::new())),
            fixed: Some(Value::String(String::new())),
            frontend_only: true,
            kind: String::new(),
        });
    }
    if AUDIO_UI.contains(&class) {
        out.push(Widget {
            name: "audioUI".into(),
            serialized: true,
            dynamic_prompts: false,
            default: Some(Value::String(String::new())),
            fixed: Some(Value::String(String::new())),
            frontend_only: true,
            kind: String::new(),
        });
    }
    if class == "SaveGLB" {
        // The 3D preview the frontend adds as a required input (`PREVIEW_3D`); it sends "".
        out.push(Widget {
            name: "image".into(),
            serialized: true,
            dynamic_prompts: false,
            default: Some(Value::String(String::new())),
            fixed: Some(Value::String(String::new())),
            frontend_only: false,
            kind: String::new(),
        });
    }
    let option = |spec: &Value, key: &str| {
        spec.get(1)
            .and_then(|o| o.get(key))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let specs = required.into_iter().flat_map(|r| r.values());
    let media = specs.clone().any(|spec| {
        let combo = matches!(spec.get(0), Some(Value::Array(_)))
            || spec.get(0).and_then(Value::as_str) == Some("COMBO");
        combo && UPLOADS.iter().any(|u| option(spec, u))
    });
    let audio = required
        .and_then(|r| r.get("audio"))
        .is_some_and(|spec| option(spec, "audio_upload"));
    if media || audio {
        out.push(Widget::unsent("upload"));
    }
}
