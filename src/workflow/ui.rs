//! A UI-format workflow (what the browser saves) converted to the API prompt ComfyUI's
//! frontend would queue for it, by the frontend's own rules (`graphToPrompt`, frontend 1.27):
//!
//! * each node's `widgets_values` are mapped to the widgets its class's definition makes, in
//!   order; a control widget after a seed (`control_after_generate`) and an upload button take
//!   a place there but are not sent;
//! * links become `[origin id, slot]`; a legacy Reroute is followed to what feeds it; native
//!   reroutes are drawing only; a PrimitiveNode's value is copied into the widget it feeds;
//! * muted nodes (mode 2) are left out, and inputs linked to them dropped; a bypassed node
//!   (mode 4) passes its input of the type asked for through; Note and MarkdownNote are the
//!   frontend's own and never sent;
//! * a subgraph's nodes are sent as `instance:inner` (nested: `a:b:c`), its inputs and outputs
//!   followed across its edges; a legacy group node's as `group:index`, its widget values
//!   being its inner nodes' one after the other.
//!
//! A node saved by another version of it (a widget count unlike the definition) is converted
//! as the frontend does it, values by position, with a warning naming the node. What the
//! frontend could not queue either (a class this install lacks, a random choice in a dynamic
//! prompt) is refused, naming the node: nothing is guessed.

use super::nodes::{NodeDefs, Widget};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// Why a workflow could not be converted: the node and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `node 12 (KSampler)`, or the workflow as a whole.
    pub node: String,
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.node, self.reason)
    }
}

/// The frontend whose rules a conversion follows: ComfyUI's own frontend changed what
/// `graphToPrompt` sends, one rule at a time. Each rule below says from which version on, as
/// measured by recording the pairs that tell the rules apart with the last release of every
/// minor version from 1.29 to 1.57 (`fixtures/ui-workflows/VERSIONS.md`); all of the pairs are
/// recorded with 1.27.10 (`pairs`), 1.42.10 (`pairs-1.42`) and 1.58.1 (`pairs-1.58`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frontend {
    /// `(major, minor)`.
    line: (u32, u32),
    /// The patch release (a few rules came to two lines at once, in a patch of each).
    patch: u32,
}

impl Frontend {
    /// 1.27 (what ComfyUI 0.3.64 pins).
    pub(crate) const V1_27: Frontend = Frontend {
        line: (1, 27),
        patch: 10,
    };
    /// 1.42: bypassed root instances left out, group nodes and the audio player as 1.27, an
    /// instance's own values only with `proxyWidgets`.
    #[cfg(test)]
    pub(crate) const V1_42: Frontend = Frontend {
        line: (1, 42),
        patch: 10,
    };
    /// 1.58 (the current line).
    pub(crate) const V1_58: Frontend = Frontend {
        line: (1, 58),
        patch: 1,
    };

    /// The rules of a frontend version (`1.33.4`).
    pub(crate) fn of_version(version: &str) -> Frontend {
        // (The leading digits of each part: `1.42.5-rc1` is 1.42.5.)
        let mut parts = version.trim().split('.').map(|p| {
            let digits = p.len() - p.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            p[..digits].parse::<u32>().unwrap_or(0)
        });
        Frontend {
            line: (parts.next().unwrap_or(0), parts.next().unwrap_or(0)),
            patch: parts.next().unwrap_or(0),
        }
    }

    fn since(self, minor: u32) -> bool {
        self.line >= (1, minor)
    }

    /// Nodes inside a bypassed subgraph instance of the root graph are not sent (those of
    /// one bypassed inside a subgraph are): from 1.39.
    fn leaves_out_bypassed_instances(self) -> bool {
        self.since(39)
    }

    /// Widgets the frontend adds (the audio player's `audioUI`) are not sent: from 1.47.
    fn drops_frontend_widgets(self) -> bool {
        self.since(47)
    }

    /// Colliding subgraph ids are renumbered on load: from 1.40.
    fn renumbers_on_load(self) -> bool {
        self.since(40)
    }

    /// Legacy group nodes become subgraphs on load (their nodes take new ids before the
    /// colliding subgraph ids do): from 1.47.
    fn converts_group_nodes_on_load(self) -> bool {
        self.since(47)
    }

    /// PreviewAny's own widgets as this frontend makes them (`fixtures/ui-workflows/
    /// VERSIONS.md`), in place of the `preview` of 1.27 (sent ""): from 1.34, `previewMode`
    /// too, which takes the node's first saved value (the two `preview` widgets are not kept
    /// in `widgets_values`, 1.38.14's `previewAny.ts`), `false` without one; from 1.40,
    /// `previewMode` as before then `preview_markdown` and `preview_text`, sent "" (1.42.10's
    /// `configure` fills only the widgets it keeps, in order); from 1.43 none.
    fn preview_any_widgets(self, widgets: Vec<Widget>) -> Vec<Widget> {
        if !self.since(34) {
            return widgets;
        }
        let own = |w: &Widget| w.frontend_only && w.name == "preview";
        let (preview, mut out): (Vec<Widget>, Vec<Widget>) = widgets.into_iter().partition(own);
        if self.since(43) {
            return out;
        }
        let frontend = |name: &str, default: Value, fixed: bool| Widget {
            name: name.into(),
            serialized: true,
            dynamic_prompts: false,
            fixed: fixed.then(|| default.clone()),
            default: Some(default),
            frontend_only: true,
            kind: String::new(),
        };
        out.push(frontend("previewMode", Value::Bool(false), false));
        if !self.since(40) {
            out.extend(preview);
            return out;
        }
        out.push(frontend(
            "preview_markdown",
            Value::String(String::new()),
            true,
        ));
        out.push(frontend("preview_text", Value::String(String::new()), true));
        out
    }

    /// A subgraph instance saved without `proxyWidgets` has its values ignored, its nodes'
    /// own sent: 1.41 to 1.45.
    fn ignores_values_without_proxy_widgets(self) -> bool {
        self.since(41) && !self.since(46)
    }

    /// Each input of an instance stands for the first of the subgraph's inputs with its name
    /// (two inputs of one name are one, and make a widget as the first does): up to 1.41.19
    /// and 1.42.4. From 1.41.20, 1.42.5 and 1.43.0 each stands for its own, in order (the
    /// subgraph node's `_rebindInputSubgraphSlots`, read in each release's `SubgraphNode.ts`;
    /// `page158_subgraph_interleaved_inputs` recorded on both sides).
    fn matches_inputs_by_first_name(self) -> bool {
        !(self.since(43)
            || self.line == (1, 42) && self.patch >= 5
            || self.line == (1, 41) && self.patch >= 20)
    }

    /// A subgraph input makes a widget from the inner node's input at its link's
    /// `target_slot`, among the node's inputs as laid out on load (the definition's, then
    /// saved ones it lacks), not the input that holds the link: up to 1.35.2
    /// (`link.resolve(..).input` in `SubgraphNode.ts`; from 1.35.3 the input is found by its
    /// link, "target_slot can't be trusted").
    ///
    /// The same change ended 1.27's k-th saved value for a linked widget input whose
    /// subgraph input the instance lacks (see `unpromoted_1_27`; 1.35.0 and 1.35.2 recorded
    /// as 1.34.9, 1.35.3 as 1.35.9).
    fn widget_from_target_slot(self) -> bool {
        !(self.since(36) || self.line == (1, 35) && self.patch >= 3)
    }

    /// Whether conversions by this frontend's rules were recorded with all of the pairs.
    /// (Versions of those lines whose rules are the recorded release's: 1.42 from 1.42.5,
    /// where its subgraph inputs of one name came to match 1.42.10's.)
    pub(crate) fn recorded(version: &str) -> bool {
        let f = Frontend::of_version(version);
        match f.line {
            (1, 27) | (1, 58) => true,
            (1, 42) => f.patch >= 5,
            _ => false,
        }
    }

    /// The line's name, as the warnings say it.
    pub(crate) fn name(self) -> String {
        format!("{}.{}", self.line.0, self.line.1)
    }

    /// The rules a conversion is compared with to say what another frontend would queue:
    /// the current line's, or 1.27's for the current line and later.
    pub(crate) fn other(self) -> Frontend {
        if self.since(58) {
            Frontend::V1_27
        } else {
            Frontend::V1_58
        }
    }
}

/// Whether `doc` is a UI-format workflow (nodes and links, not `{id: {class_type, inputs}}`).
pub(crate) fn is_ui_format(doc: &Value) -> bool {
    doc.get("nodes").is_some_and(Value::is_array) && doc.get("links").is_some()
}

/// Node types that live in the frontend only.
const FRONTEND_ONLY: &[&str] = &["Note", "MarkdownNote", "Reroute", "PrimitiveNode"];
const MUTED: i64 = 2;
const BYPASSED: i64 = 4;
/// The ids of a subgraph's input and output nodes in its links.
const SUBGRAPH_INPUT: i64 = -10;
const SUBGRAPH_OUTPUT: i64 = -20;
/// Subgraphs inside subgraphs deeper than this are refused (a definition that contains itself).
const MAX_DEPTH: usize = 32;
/// Subgraph uses in all (definitions that each use the next twice would open 2^depth).
const MAX_SCOPES: usize = 10_000;
/// `{...}` blocks of a dynamic prompt nested deeper than this are refused.
const MAX_BRACES: usize = 64;

/// A link: from `origin`'s output `origin_slot` to `target`'s input `target_slot`.
#[derive(Debug, Clone)]
struct Link {
    origin: i64,
    origin_slot: usize,
    target: i64,
    target_slot: usize,
    kind: String,
}

/// One graph: the root, or a subgraph's definition.
struct Graph<'a> {
    nodes: Vec<&'a Value>,
    by_id: HashMap<i64, &'a Value>,
    links: HashMap<i64, Link>,
    /// A subgraph's own inputs and outputs, by name (its node's slots carry the same names,
    /// not always in the same order).
    inputs: Vec<String>,
    /// Each of the subgraph's own inputs' links (`linkIds`), in the order it keeps them.
    input_links: Vec<Vec<i64>>,
    outputs: Vec<String>,
    /// A legacy group node's inside: its slots are the group node's by position, and its
    /// nodes' widget values are the group node's own, in order.
    group: bool,
}

/// A graph where it is used: the root, or inside a subgraph node (whose id prefixes the ids
/// of the nodes inside it).
struct Scope<'a> {
    graph: &'a Graph<'a>,
    prefix: String,
    /// The scope holding the subgraph node, and that node.
    parent: Option<(usize, &'a Value)>,
}

/// What a link from a subgraph's input finds a widget at (see `Converter::widget_found`).
enum Found<'g> {
    /// A node's widget, by name.
    Widget(&'g Value, String),
    /// A nested instance's subgraph input.
    Nested(&'g Graph<'g>, usize),
}

/// What an input resolves to.
enum Source {
    Output(String, usize),
    Value(Value),
}

/// Converts a UI-format workflow with the node definitions of the install it will run on.
#[cfg(test)]
pub(crate) fn convert(doc: &Value, defs: &NodeDefs) -> Result<Map<String, Value>, Refusal> {
    convert_with_warnings(doc, defs).map(|(prompt, _)| prompt)
}

/// [`convert`] by the rules of frontend 1.27.
#[cfg(test)]
pub(crate) fn convert_with_warnings(
    doc: &Value,
    defs: &NodeDefs,
) -> Result<(Map<String, Value>, Vec<String>), Refusal> {
    convert_for(doc, defs, Frontend::V1_27)
}

/// The prompt `frontend` would queue, with a line for each thing it does that the user should
/// know of (a node whose saved values do not match this ComfyUI's widgets, mapped by
/// position).
pub(crate) fn convert_for(
    doc: &Value,
    defs: &NodeDefs,
    frontend: Frontend,
) -> Result<(Map<String, Value>, Vec<String>), Refusal> {
    if !frontend.renumbers_on_load() {
        return convert_doc(doc, defs, frontend);
    }
    // Later frontends give nodes new ids on load; converted from the renumbered workflow, the
    // group nodes' `instance:index` ids then take theirs.
    let (doc, renames) = renumber_on_load(doc, frontend.converts_group_nodes_on_load());
    let (prompt, warnings) = convert_doc(&doc, defs, frontend)?;
    Ok((rename_ids(prompt, &renames), warnings))
}

/// What frontend 1.58 does to ids on load (observed in `pairs-1.58`): each legacy group node
/// becomes a subgraph whose inner nodes get the next ids after the workflow's last, in the
/// group's order, and then the instance one more (with `groups`: 1.40 to 1.46 keep group
/// nodes as they are, `pairs-1.42`); then, in the order of the subgraph definitions, an
/// inner node whose id is taken (by the root graph or an earlier definition) gets the next
/// id, in the order the definition lists its nodes. Returns the renumbered workflow and the
/// prompt ids group nodes' nodes take (`15:0` → `18:16`).
fn renumber_on_load(doc: &Value, groups: bool) -> (Value, HashMap<String, String>) {
    let mut doc = doc.clone();
    let mut renames = HashMap::new();
    let id_of = |n: &Value| n.get("id").and_then(Value::as_i64);
    let root: Vec<i64> = doc
        .get("nodes")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(id_of).collect())
        .unwrap_or_default();
    let mut last = [
        doc.get("last_node_id").and_then(Value::as_i64),
        doc.pointer("/state/lastNodeId").and_then(Value::as_i64),
        root.iter().copied().max(),
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(0);
    let mut used: std::collections::HashSet<i64> = root.iter().copied().collect();
    // Legacy group nodes.
    let groups: HashMap<String, usize> = doc
        .pointer("/extra/groupNodes")
        .filter(|_| groups)
        .and_then(Value::as_object)
        .map(|g| {
            g.iter()
                .map(|(name, def)| {
                    let n = def
                        .get("nodes")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len);
                    (name.clone(), n)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut inner_of: HashMap<String, i64> = HashMap::new();
    for node in doc
        .get("nodes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let kind = kind_of(node);
        let Some(name) = kind
            .strip_prefix("workflow>")
            .or_else(|| kind.strip_prefix("workflow/"))
        else {
            continue;
        };
        let Some(&count) = groups.get(name) else {
            continue;
        };
        let first = *inner_of.entry(name.to_string()).or_insert_with(|| {
            let first = last + 1;
            last += count as i64;
            first
        });
        last += 1;
        let instance = last;
        used.insert(instance);
        for index in 0..count {
            used.insert(first + index as i64);
            renames.insert(
                format!("{}:{index}", id_text(node)),
                format!("{instance}:{}", first + index as i64),
            );
        }
    }
    // Subgraph definitions.
    if let Some(defs) = doc
        .pointer_mut("/definitions/subgraphs")
        .and_then(Value::as_array_mut)
    {
        for def in defs {
            let mut map: HashMap<i64, i64> = HashMap::new();
            for node in def
                .get_mut("nodes")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                let Some(id) = id_of(node) else { continue };
                if used.contains(&id) {
                    last += 1;
                    map.insert(id, last);
                    node["id"] = json!(last);
                    used.insert(last);
                } else {
                    used.insert(id);
                }
            }
            if map.is_empty() {
                continue;
            }
            for link in def
                .get_mut("links")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                for (key, index) in [("origin_id", 1), ("target_id", 3)] {
                    let slot = match link {
                        Value::Object(o) => o.get_mut(key),
                        Value::Array(a) => a.get_mut(index),
                        _ => None,
                    };
                    if let Some(v) = slot
                        && let Some(new) = v.as_i64().and_then(|old| map.get(&old))
                    {
                        *v = json!(new);
                    }
                }
            }
        }
    }
    (doc, renames)
}

/// The prompt with group nodes' ids renamed (keys and the links that point at them).
fn rename_ids(prompt: Map<String, Value>, renames: &HashMap<String, String>) -> Map<String, Value> {
    if renames.is_empty() {
        return prompt;
    }
    let rename = |id: &str| renames.get(id).cloned().unwrap_or_else(|| id.to_string());
    prompt
        .into_iter()
        .map(|(id, mut entry)| {
            if let Some(inputs) = entry.get_mut("inputs").and_then(Value::as_object_mut) {
                for v in inputs.values_mut() {
                    if let Some(a) = v.as_array_mut()
                        && a.len() == 2
                        && let Some(from) = a[0].as_str()
                    {
                        a[0] = json!(rename(from));
                    }
                }
            }
            (rename(&id), entry)
        })
        .collect()
}

/// The prompt `frontend` queues for the workflow as it was loaded.
fn convert_doc(
    doc: &Value,
    defs: &NodeDefs,
    frontend: Frontend,
) -> Result<(Map<String, Value>, Vec<String>), Refusal> {
    let whole = |reason: String| Refusal {
        node: "the workflow".into(),
        reason,
    };
    let root = graph(doc).map_err(whole)?;
    let groups = group_graphs(doc, defs).map_err(whole)?;
    let mut subgraphs: HashMap<String, Graph> = HashMap::new();
    for (name, inside) in &groups {
        for sep in ['>', '/'] {
            subgraphs.insert(
                format!("workflow{sep}{name}"),
                graph(inside).map_err(whole)?,
            );
        }
    }
    if let Some(defs_list) = doc
        .pointer("/definitions/subgraphs")
        .and_then(Value::as_array)
    {
        for sg in defs_list {
            let id = sg.get("id").and_then(Value::as_str).unwrap_or_default();
            subgraphs.insert(id.to_string(), graph(sg).map_err(whole)?);
        }
    }
    let mut scopes = vec![Scope {
        graph: &root,
        prefix: String::new(),
        parent: None,
    }];
    open_subgraphs(&mut scopes, 0, &subgraphs, 0)?;
    let conv = Converter {
        scopes: &scopes,
        subgraphs: &subgraphs,
        defs,
        warnings: Default::default(),
        frontend,
    };
    let mut out = Map::new();
    for (i, scope) in scopes.iter().enumerate() {
        if conv.inside_left_out(i) {
            continue;
        }
        for node in &scope.graph.nodes {
            if let Some((id, entry)) = conv.node(i, node)? {
                out.insert(id, entry);
            }
        }
    }
    drop_links_to_left_out(&mut out);
    Ok((out, conv.warnings.into_inner()))
}

/// Adds a scope for every subgraph node in scope `at`, and for those inside them.
fn open_subgraphs<'a>(
    scopes: &mut Vec<Scope<'a>>,
    at: usize,
    subgraphs: &'a HashMap<String, Graph<'a>>,
    depth: usize,
) -> Result<(), Refusal> {
    let graph = scopes[at].graph;
    for node in &graph.nodes {
        let Some(sg) = subgraphs.get(kind_of(node)) else {
            continue;
        };
        if depth >= MAX_DEPTH {
            return Err(refusal(
                node,
                "its subgraphs nest too deep (one contains itself?)",
            ));
        }
        if scopes.len() >= MAX_SCOPES {
            return Err(refusal(
                node,
                &format!("its subgraphs open more than {MAX_SCOPES} subgraphs in all"),
            ));
        }
        let prefix = format!("{}{}:", scopes[at].prefix, id_text(node));
        scopes.push(Scope {
            graph: sg,
            prefix,
            parent: Some((at, node)),
        });
        let child = scopes.len() - 1;
        open_subgraphs(scopes, child, subgraphs, depth + 1)?;
    }
    Ok(())
}

struct Converter<'a> {
    scopes: &'a [Scope<'a>],
    subgraphs: &'a HashMap<String, Graph<'a>>,
    defs: &'a NodeDefs,
    /// What the user should know of the conversion, a line each.
    warnings: std::cell::RefCell<Vec<String>>,
    frontend: Frontend,
}

impl<'a> Converter<'a> {
    /// The widgets the frontend makes for `class`: the definition's, and the frontend's own
    /// as this line makes them.
    fn widgets(&self, class: &str) -> Result<Vec<Widget>, String> {
        let widgets = self.defs.widgets(class)?;
        Ok(match class {
            "PreviewAny" => self.frontend.preview_any_widgets(widgets),
            _ => widgets,
        })
    }

    /// Whether scope `i` is inside a muted subgraph node. (Frontend 1.27 still sends what is
    /// inside a bypassed one, though links through it pass it by.)
    fn inside_left_out(&self, mut i: usize) -> bool {
        while let Some((parent, node)) = self.scopes[i].parent {
            // Frontend 1.58 leaves a bypassed subgraph's nodes out too, but only for an
            // instance in the root graph: one bypassed inside a subgraph still has its nodes
            // sent (links through it pass it by), as recorded in
            // `pairs-1.58/cur_flux1_dev_uso_reference_image_gen`.
            let root_instance = self.scopes[parent].parent.is_none();
            if mode(node) == MUTED
                || (self.frontend.leaves_out_bypassed_instances()
                    && root_instance
                    && mode(node) == BYPASSED)
            {
                return true;
            }
            i = parent;
        }
        false
    }

    /// One node's entry in the prompt, or `None` for what is not sent.
    fn node(&self, scope: usize, node: &Value) -> Result<Option<(String, Value)>, Refusal> {
        let class = kind_of(node);
        if FRONTEND_ONLY.contains(&class)
            || self.subgraphs.contains_key(class)
            || matches!(mode(node), MUTED | BYPASSED)
        {
            return Ok(None);
        }
        if !self.defs.has(class) {
            return Err(refusal(
                node,
                &format!(
                    "this ComfyUI has no node class {class} (a custom node not installed here?)"
                ),
            ));
        }
        let widgets = self.widgets(class).map_err(|r| refusal(node, &r))?;
        let mut inputs = match self.scopes[scope].graph.group {
            true => self.group_widget_inputs(scope, node, &widgets)?,
            false => self.widget_inputs(node, &widgets)?,
        };
        let slots = node.get("inputs").and_then(Value::as_array);
        for (slot, input) in slots.into_iter().flatten().enumerate() {
            let Some(name) = input.get("name").and_then(Value::as_str) else {
                continue;
            };
            if input.get("link").and_then(Value::as_i64).is_none() {
                continue;
            }
            match self.resolve_input(scope, node, slot, 0)? {
                Some(Source::Output(id, s)) => {
                    inputs.insert(name.to_string(), json!([id, s]));
                }
                Some(Source::Value(v)) => {
                    // A value for an input this version of the node lacks (saved by a newer
                    // one) is not sent: the frontend has no widget to put it in.
                    if !self.defs.has_input(class, name) {
                        continue;
                    }
                    let widget = widgets.iter().find(|w| w.name == name);
                    inputs.insert(name.to_string(), wrap(self.widget_value(node, widget, v)?));
                }
                None => {
                    if let Some(v) = self.unpromoted_1_27(scope, node, slot, &widgets) {
                        let widget = widgets.iter().find(|w| w.name == name);
                        inputs.insert(name.to_string(), wrap(self.widget_value(node, widget, v)?));
                    }
                }
            }
        }
        let title = node
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or(class)
            .to_string();
        let id = format!("{}{}", self.scopes[scope].prefix, id_text(node));
        Ok(Some((
            id,
            json!({"inputs": inputs, "class_type": class, "_meta": {"title": title}}),
        )))
    }

    /// The widget values of a node inside a legacy group node: the group node's own values,
    /// which are its inner nodes' widgets one after the other.
    fn group_widget_inputs(
        &self,
        scope: usize,
        node: &Value,
        widgets: &[Widget],
    ) -> Result<Map<String, Value>, Refusal> {
        let Some((_, instance)) = self.scopes[scope].parent else {
            return Ok(Map::new());
        };
        let graph = self.scopes[scope].graph;
        let index = node.get("id").and_then(Value::as_i64).unwrap_or(0);
        let mut offset = 0;
        let mut total = 0;
        for inner in &graph.nodes {
            let n = self.widgets(kind_of(inner)).map(|w| w.len()).unwrap_or(0);
            if inner.get("id").and_then(Value::as_i64).unwrap_or(0) < index {
                offset += n;
            }
            total += n;
        }
        let values = instance
            .get("widgets_values")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if values.len() != total {
            return Err(refusal(
                instance,
                &format!(
                    "this group node has {} widget values where its nodes make {total} widgets",
                    values.len()
                ),
            ));
        }
        let mut own = node.clone();
        own["widgets_values"] = Value::Array(values[offset..offset + widgets.len()].to_vec());
        self.widget_inputs(&own, widgets)
    }

    /// The values of a node's widgets that are sent, by input name.
    fn widget_inputs(
        &self,
        node: &Value,
        widgets: &[Widget],
    ) -> Result<Map<String, Value>, Refusal> {
        let saved: Option<&[Value]> = match node.get("widgets_values") {
            None | Some(Value::Null) => None,
            Some(Value::Array(v)) if v.is_empty() => None,
            Some(Value::Array(v)) => Some(v),
            Some(_) => {
                return Err(refusal(
                    node,
                    "its widget values are kept by name (a custom node's own format)",
                ));
            }
        };
        // Saved by another version of the node: the frontend maps the values to this
        // ComfyUI's widgets by position from the start, drops those past the last widget and
        // gives missing ones their default. What it queues is what runs, said in a warning.
        // (Fewer values than widgets where the rest are the frontend's own, which another
        // line did not make, is no difference worth a word: those take their defaults.)
        if let Some(values) = saved
            && values.len() != widgets.len()
            && !widgets
                .get(values.len()..)
                .is_some_and(|rest| rest.iter().all(|w| w.frontend_only))
        {
            let what = if values.len() > widgets.len() {
                format!("the last {} dropped", values.len() - widgets.len())
            } else {
                let missing: Vec<&str> = widgets[values.len()..]
                    .iter()
                    .filter(|w| w.serialized)
                    .map(|w| w.name.as_str())
                    .collect();
                format!("{} at its default", missing.join(", "))
            };
            let r = refusal(node, "");
            self.say(format!(
                "{}: {} saved widget values where this ComfyUI's definition makes {} widgets (saved by another version of the node): mapped by position as the frontend does, {what}",
                r.node,
                values.len(),
                widgets.len()
            ));
        }
        let mut out = Map::new();
        for (i, w) in widgets.iter().enumerate() {
            if !w.serialized || (w.frontend_only && self.frontend.drops_frontend_widgets()) {
                continue;
            }
            // No values saved: the widgets start at their defaults, as a new node's do.
            let value = match (&w.fixed, saved.and_then(|v| v.get(i))) {
                (Some(fixed), _) => fixed.clone(),
                (None, Some(value)) => value.clone(),
                (None, None) => w.default.clone().ok_or_else(|| {
                    refusal(
                        node,
                        &format!(
                            "it has no saved widget values and {} has no default",
                            w.name
                        ),
                    )
                })?,
            };
            out.insert(
                w.name.clone(),
                wrap(self.widget_value(node, Some(w), value)?),
            );
        }
        Ok(out)
    }

    /// Adds a warning, once (an instance's values are read for each input they feed).
    fn say(&self, line: String) {
        let mut warnings = self.warnings.borrow_mut();
        if !warnings.contains(&line) {
            warnings.push(line);
        }
    }

    /// A widget's value as the frontend sends it: a dynamic prompt processed. A value not of
    /// the kind the input declares (text where a FLOAT is asked for: a value taken from the
    /// wrong place, or saved by another version of the node) is sent as the frontend sends
    /// it, with a warning naming the node and the input.
    fn widget_value(&self, node: &Value, w: Option<&Widget>, v: Value) -> Result<Value, Refusal> {
        if let Some(w) = w
            && !w.accepts(&v)
        {
            let shown: String = v.to_string().chars().take(60).collect();
            self.say(format!(
                "{}: {} is sent {shown}, which is not the {} the node declares for it (the workflow gives it a value of another kind; ComfyUI will likely reject or misread it)",
                refusal(node, "").node,
                w.name,
                w.kind
            ));
        }
        match (w, &v) {
            (Some(w), Value::String(text)) if w.dynamic_prompts => dynamic_prompt(text)
                .map(Value::String)
                .map_err(|r| refusal(node, &r)),
            _ => Ok(v),
        }
    }

    /// What frontend 1.27 queues for a widget input of a node inside a subgraph, linked to
    /// the subgraph's own input, when the subgraph node has no such input (a later frontend
    /// saved its widgets as promoted, `proxyWidgets`, with no values of its own): not the
    /// node's own value but, for the k-th linked widget input of the node, the k-th of its
    /// saved values leaving out those of control widgets (`control_after_generate`). So a
    /// KSampler with steps and cfg linked gets its seed as steps and its steps as cfg.
    /// Recorded with 1.27.10 (`pairs/cur_image_ovis_text_to_image`,
    /// `cur_template_qwen_image_illustration_lora`; and where the order agrees, in
    /// `cur_image_z_image_turbo`, `cur_flux1_krea_dev`). Frontend 1.58 uses the node's own.
    fn unpromoted_1_27(
        &self,
        scope: usize,
        node: &Value,
        slot: usize,
        widgets: &[Widget],
    ) -> Option<Value> {
        if !self.frontend.widget_from_target_slot() {
            return None;
        }
        let graph = self.scopes[scope].graph;
        let link = input_link(node, slot).and_then(|l| graph.links.get(&l))?;
        let (_, instance) = self.scopes[scope].parent?;
        if link.origin != SUBGRAPH_INPUT
            || graph.group
            || outer_slot(graph, instance, link.origin_slot).is_some()
        {
            return None;
        }
        let inputs = node.get("inputs")?.as_array()?;
        inputs.get(slot)?.get("widget")?;
        let k = inputs[..slot]
            .iter()
            .filter(|i| {
                i.get("widget").is_some() && i.get("link").and_then(Value::as_i64).is_some()
            })
            .count();
        node.get("widgets_values")?
            .as_array()?
            .iter()
            .enumerate()
            .filter(|(i, _)| widgets.get(*i).is_none_or(|w| w.serialized))
            .nth(k)
            .map(|(_, v)| v.clone())
    }

    /// Whether input `slot` of `node` (in `scope`) is a widget input linked to its
    /// subgraph's own input that the subgraph's instance lacks: what `unpromoted_1_27` fills.
    fn unpromoted_1_27_applies(&self, scope: usize, node: &Value, slot: usize) -> bool {
        let graph = self.scopes[scope].graph;
        let Some(link) = input_link(node, slot).and_then(|l| graph.links.get(&l)) else {
            return false;
        };
        let Some((_, instance)) = self.scopes[scope].parent else {
            return false;
        };
        link.origin == SUBGRAPH_INPUT
            && !graph.group
            && outer_slot(graph, instance, link.origin_slot).is_none()
            && node.pointer(&format!("/inputs/{slot}/widget")).is_some()
    }

    /// Where input `slot` of `node` (in `scope`) gets its value.
    fn resolve_input(
        &self,
        scope: usize,
        node: &Value,
        slot: usize,
        depth: usize,
    ) -> Result<Option<Source>, Refusal> {
        if depth > 256 {
            return Err(refusal(node, "its links go round in a loop"));
        }
        let graph = self.scopes[scope].graph;
        let Some(link) = input_link(node, slot).and_then(|l| graph.links.get(&l)) else {
            return Ok(None);
        };
        if link.origin == SUBGRAPH_INPUT {
            // Across the subgraph's edge, to what feeds the subgraph node there.
            let Some((parent, instance)) = self.scopes[scope].parent else {
                return Ok(None);
            };
            // Two inputs of one name: which of them a link into the instance feeds is not
            // certain (the frontend lays the instance's saved inputs out by name).
            let shared = !graph.group && shares_name(graph, link.origin_slot) > 1;
            if shared && linked_named(instance, &graph.inputs[link.origin_slot]) {
                let name = &graph.inputs[link.origin_slot];
                return Err(refusal(
                    instance,
                    &format!(
                        "its subgraph has {} inputs named {name} and the instance has one linked: which of them the link feeds cannot be told",
                        shares_name(graph, link.origin_slot)
                    ),
                ));
            }
            let outer = outer_slot(graph, instance, link.origin_slot).filter(|_| !shared);
            if let Some(outer) = outer
                && input_link(instance, outer).is_some()
            {
                let found = self.resolve_input(parent, instance, outer, depth + 1)?;
                // A nested instance's promoted widget promoted again by a subgraph input its
                // own instance lacks: up to 1.35.2 the outer instance's widget for it is a copy
                // of the widget its link finds (`copied_value`), with that widget's value
                // (page142_subgraph_nested_promoted_again: blur_radius sent as the nested
                // instance's blend_factor 0.25, the input at the link's slot as 1.27 lays the
                // nested instance out).
                if found.is_none()
                    && self.frontend.widget_from_target_slot()
                    && !graph.group
                    && self.unpromoted_1_27_applies(parent, instance, outer)
                {
                    let copied = match self.scopes[parent]
                        .graph
                        .links
                        .get(&input_link(instance, outer).unwrap_or_default())
                    {
                        Some(l) => self.copied_value(parent, l.origin_slot, 0)?,
                        None => None,
                    };
                    return match copied {
                        Some(v) => Ok(Some(Source::Value(v))),
                        None => Err(refusal(
                            instance,
                            &format!(
                                "its promoted widget {} is promoted again by a subgraph input its outer instance was saved without: which value frontend {} sends for it cannot be told",
                                graph.inputs[link.origin_slot],
                                self.frontend.name()
                            ),
                        )),
                    };
                }
                return Ok(found);
            }
            // 1.42 keeps promoted values in `proxyWidgets`; an instance saved without it
            // (by 1.58's page) has its values ignored, the nodes' own are sent.
            if self.frontend.ignores_values_without_proxy_widgets()
                && instance.pointer("/properties/proxyWidgets").is_none()
            {
                return Ok(None);
            }
            if !graph.group
                && let Some(values) = self.instance_values(scope, instance)?
            {
                let slot = self.stands_for(graph, link.origin_slot);
                return Ok(values.get(&slot).cloned().map(Source::Value));
            }
            return Ok(outer
                .and_then(|outer| promoted_value(instance, outer))
                .map(Source::Value));
        }
        let Some(origin) = graph.by_id.get(&link.origin) else {
            return Ok(None);
        };
        self.resolve_output(scope, origin, link.origin_slot, &link.kind, depth + 1)
    }

    /// A subgraph instance's own widget values, by the index of the subgraph input each
    /// stands for, when it saved any: every frontend line makes the instance one widget per
    /// subgraph input that feeds an inner widget (the first of its links that does, a
    /// promoted widget of a nested instance too), in the order of the subgraph's inputs,
    /// whatever inputs the instance itself was saved with, and gives them the saved values
    /// in that order. Inputs that feed no widget (IMAGE, MODEL, ...) take none, and a seed's
    /// `control_after_generate` is not copied onto the instance, so takes none either.
    /// (Recorded with 1.27.10, 1.42.10 and 1.58.1: `cur_image_qwen_image_edit_2511_lora_inflation`,
    /// whose instance was saved with four of its ten inputs, a FLOAT one among them, and
    /// the `edit_*` pairs.) Saved values that are not one per such input cannot be placed
    /// with certainty: refused, naming the instance. `scope` is the scope inside `instance`.
    fn instance_values(
        &self,
        scope: usize,
        instance: &Value,
    ) -> Result<Option<HashMap<usize, Value>>, Refusal> {
        let values = match instance.get("widgets_values") {
            Some(Value::Array(v)) if !v.is_empty() => v,
            _ => return Ok(None),
        };
        let graph = self.scopes[scope].graph;
        let widget_inputs: Vec<usize> = (0..graph.inputs.len())
            .filter(|&k| self.feeds_widget(graph, self.stands_for(graph, k), 0))
            .collect();
        let names: Vec<&str> = widget_inputs
            .iter()
            .map(|&k| graph.inputs[k].as_str())
            .collect();
        // More values than such inputs: the frontend gives them to the inputs in order and
        // drops the rest, as it does a node's. Placed so where the reason is known, said,
        // naming the instance: saved for a ComfyUI whose inner nodes make a widget this one
        // lacks, by 1.58 (`pairs-1.58/cur_3d_hunyuan3d_*`: ModelSamplingAuraFlow's `sampling`
        // value sent as KSampler's steps), or by a frontend that gives each of two inputs of
        // one name its own widget, by a line that makes one for the first only
        // (`page158_subgraph_interleaved_inputs` on 1.27.10).
        let own_widgets = (0..graph.inputs.len())
            .filter(|&k| self.feeds_widget(graph, k, 0))
            .count();
        let why = if values.len() == own_widgets && own_widgets > widget_inputs.len() {
            Some("saved by a frontend that gives each of two subgraph inputs of one name a widget")
        } else if !self.frontend.ignores_values_without_proxy_widgets() {
            Some("saved for one whose nodes make more widgets")
        } else {
            None
        };
        if values.len() > widget_inputs.len()
            && let Some(why) = why
        {
            self.say(format!(
                "{}: {} saved widget values for the {} subgraph inputs that feed a widget in this ComfyUI ({}) ({why}): mapped by position as frontend {} does, the last {} dropped",
                refusal(instance, "").node,
                values.len(),
                widget_inputs.len(),
                names.join(", "),
                self.frontend.name(),
                values.len() - widget_inputs.len()
            ));
            return Ok(Some(
                widget_inputs
                    .into_iter()
                    .zip(values.iter().cloned())
                    .collect(),
            ));
        }
        // Fewer: up to 1.35.2 the values go to the first widgets and the rest keep what
        // they were made with (`copied_value`; `built_subgraph_nested_promoted_again`, saved
        // by 1.27.10's page, whose outer instance makes a widget for `mask` too, as its link
        // lands on the nested instance's `blur_radius`).
        if values.len() < widget_inputs.len() && self.frontend.widget_from_target_slot() {
            let mut out: HashMap<usize, Value> = HashMap::new();
            for (i, &k) in widget_inputs.iter().enumerate() {
                let value = match values.get(i) {
                    Some(v) => Some(v.clone()),
                    None => self.copied_value(scope, self.stands_for(graph, k), 0)?,
                };
                out.extend(value.map(|v| (k, v)));
            }
            return Ok(Some(out));
        }
        if widget_inputs.len() != values.len() {
            return Err(refusal(
                instance,
                &format!(
                    "this subgraph instance saved {} widget values for the {} subgraph inputs that feed a widget ({}): which value is whose cannot be told",
                    values.len(),
                    widget_inputs.len(),
                    names.join(", ")
                ),
            ));
        }
        Ok(Some(
            widget_inputs
                .into_iter()
                .zip(values.iter().cloned())
                .collect(),
        ))
    }

    /// The subgraph input that input `k` of an instance of `graph` stands for: itself, or by
    /// the rules of lines that match by name, the first input with its name (it makes a
    /// widget, of that name, when the first does, and sends that widget's value).
    fn stands_for(&self, graph: &Graph, k: usize) -> usize {
        match (
            self.frontend.matches_inputs_by_first_name(),
            graph.inputs.get(k),
        ) {
            (true, Some(name)) => graph.inputs.iter().position(|n| n == name).unwrap_or(k),
            _ => k,
        }
    }

    /// Whether subgraph input `k` of `graph` feeds a widget: the first of its links that
    /// ends on a widget input of a node, or on a promoted one of a nested instance.
    fn feeds_widget(&self, graph: &Graph, k: usize, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        input_link_ids(graph, k)
            .iter()
            .any(|id| match self.widget_found(graph, *id) {
                Some(Found::Nested(inner, j)) => self.feeds_widget(inner, j, depth + 1),
                Some(Found::Widget(node, name)) => self
                    .widgets(kind_of(node))
                    .is_ok_and(|w| w.iter().any(|w| w.serialized && w.name == name)),
                None => false,
            })
    }

    /// What link `id` of `graph` (from one of its subgraph's inputs) finds a widget at, as
    /// the frontend asks (`getWidgetFromSlot`): up to 1.35.2 the input at the link's
    /// `target_slot` as the node is laid out on load (see `laid_out_widget`; a nested
    /// instance's inputs in its subgraph's order, so `page142_subgraph_nested_promoted_again`'s
    /// `mask` link, saved at slot 4, lands on `blur_radius`), later the input that holds the
    /// link. A widget of a node by name (whether the node has it is the caller's question),
    /// or a nested instance's subgraph input.
    fn widget_found<'g>(&'g self, graph: &Graph<'g>, id: i64) -> Option<Found<'g>> {
        let link = graph.links.get(&id)?;
        let node: &'g Value = graph.by_id.get(&link.target)?;
        let saved = node.get("inputs").and_then(Value::as_array);
        let holder = || {
            saved?
                .iter()
                .position(|i| i.get("link").and_then(Value::as_i64) == Some(id))
        };
        let by_slot = self.frontend.widget_from_target_slot();
        if let Some(inner) = self.subgraphs.get(kind_of(node))
            && !inner.group
        {
            let j = match by_slot {
                true => (link.target_slot < inner.inputs.len()).then_some(link.target_slot)?,
                false => {
                    // The holder's name; of several inputs of that name, the one it stands
                    // for by its place among them.
                    let saved = saved?;
                    let at = holder()?;
                    let name = saved[at].get("name").and_then(Value::as_str)?;
                    let before = saved[..at]
                        .iter()
                        .filter(|i| i.get("name").and_then(Value::as_str) == Some(name))
                        .count();
                    inner
                        .inputs
                        .iter()
                        .enumerate()
                        .filter(|(_, n)| *n == name)
                        .nth(before)
                        .map(|(j, _)| j)?
                }
            };
            return Some(Found::Nested(inner, self.stands_for(inner, j)));
        }
        let name = match by_slot {
            true => self.laid_out_widget(node, link.target_slot)?,
            false => saved?
                .get(holder()?)?
                .pointer("/widget/name")?
                .as_str()?
                .to_string(),
        };
        Some(Found::Widget(node, name))
    }

    /// The value an instance's widget for its subgraph input `k` starts with where the
    /// instance saved none, by the rules of lines that make it from the inner input at a
    /// link's slot (up to 1.35.2): a copy of the widget the first of `k`'s links finds there
    /// (see `laid_out_widget` and `nested_input_at`), with that widget's value, the node's own
    /// or the nested instance's. `scope` is the scope inside the instance.
    fn copied_value(&self, scope: usize, k: usize, depth: usize) -> Result<Option<Value>, Refusal> {
        if depth > MAX_DEPTH {
            return Ok(None);
        }
        let graph = self.scopes[scope].graph;
        for id in input_link_ids(graph, k) {
            match self.widget_found(graph, id) {
                Some(Found::Nested(inner, j)) if self.feeds_widget(inner, j, depth + 1) => {
                    let link = &graph.links[&id];
                    let node = graph.by_id[&link.target];
                    let Some(child) = self.scope_of_instance(scope, node) else {
                        return Ok(None);
                    };
                    if let Some(values) = self.instance_values(child, node)? {
                        return Ok(values.get(&j).cloned());
                    }
                    return self.copied_value(child, j, depth + 1);
                }
                Some(Found::Widget(node, name)) => {
                    let Ok(widgets) = self.widgets(kind_of(node)) else {
                        continue;
                    };
                    let Some(i) = widgets.iter().position(|w| w.serialized && w.name == name)
                    else {
                        continue;
                    };
                    let saved = node.get("widgets_values").and_then(|v| v.get(i)).cloned();
                    return Ok(saved.or_else(|| widgets[i].default.clone()));
                }
                _ => {}
            }
        }
        Ok(None)
    }

    /// The widget named by input `slot` of `node` as frontends up to 1.35.2 lay a node's
    /// inputs out on load (`litegraphService`'s `configure`): the definition's inputs
    /// (sockets, then widget inputs), each replaced by the saved one of its name but marked a
    /// widget's as the definition says, then the saved inputs the definition lacks, in their
    /// order. (`cur_3d_hunyuan3d_v2_1`: ModelSamplingAuraFlow saved with `sampling` at slot
    /// 1, where 0.3.64's lays out `shift`, so the subgraph input `sampling` makes a widget.)
    fn laid_out_widget(&self, node: &Value, slot: usize) -> Option<String> {
        let saved: &[Value] = node
            .get("inputs")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice);
        let saved_named = |name: &str| {
            saved
                .iter()
                .find(|i| i.get("name").and_then(Value::as_str) == Some(name))
        };
        let widget_of = |i: &Value| {
            i.pointer("/widget/name")
                .and_then(Value::as_str)
                .map(String::from)
        };
        let Some(layout) = self.defs.input_layout(kind_of(node)) else {
            return saved.get(slot).and_then(widget_of);
        };
        let defined = layout.iter().map(|(name, widget)| match widget {
            true => Some(name.clone()),
            false => saved_named(name).and_then(widget_of),
        });
        let extra = saved
            .iter()
            .filter(|i| {
                let name = i.get("name").and_then(Value::as_str).unwrap_or("");
                !layout.iter().any(|(n, _)| n == name)
            })
            .map(widget_of);
        defined.chain(extra).nth(slot).flatten()
    }

    /// What output `slot` of `node` (in `scope`) stands for, asked for as type `kind`.
    fn resolve_output(
        &self,
        scope: usize,
        node: &Value,
        slot: usize,
        kind: &str,
        depth: usize,
    ) -> Result<Option<Source>, Refusal> {
        if depth > 256 {
            return Err(refusal(node, "its links go round in a loop"));
        }
        let class = kind_of(node);
        if mode(node) == BYPASSED {
            return match bypass_slot(node, slot, kind) {
                Some(i) => self.resolve_input(scope, node, i, depth + 1),
                None => Ok(None),
            };
        }
        match class {
            "Reroute" => return self.resolve_input(scope, node, 0, depth + 1),
            "PrimitiveNode" => {
                return Ok(node
                    .get("widgets_values")
                    .and_then(|v| v.get(0))
                    .cloned()
                    .map(Source::Value));
            }
            "Note" | "MarkdownNote" => return Ok(None),
            _ => {}
        }
        if self.subgraphs.contains_key(class) {
            // Into the subgraph, to what feeds its output `slot`.
            let Some(inner) = self.scope_of_instance(scope, node) else {
                return Ok(None);
            };
            let graph = self.scopes[inner].graph;
            let name = node
                .get("outputs")
                .and_then(|o| o.get(slot))
                .and_then(|o| o.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let inner_slot = match graph.group {
                true => slot,
                false => graph.outputs.iter().position(|n| n == name).unwrap_or(slot),
            };
            let Some(link) = graph
                .links
                .iter()
                .filter(|(_, l)| l.target == SUBGRAPH_OUTPUT && l.target_slot == inner_slot)
                .min_by_key(|(id, _)| **id)
                .map(|(_, l)| l)
            else {
                return Ok(None);
            };
            if link.origin == SUBGRAPH_INPUT {
                let Some(outer) = outer_slot(graph, node, link.origin_slot) else {
                    return Ok(None);
                };
                return match input_link(node, outer) {
                    Some(_) => self.resolve_input(scope, node, outer, depth + 1),
                    None => Ok(None),
                };
            }
            let Some(origin) = graph.by_id.get(&link.origin) else {
                return Ok(None);
            };
            return self.resolve_output(inner, origin, link.origin_slot, kind, depth + 1);
        }
        let id = format!("{}{}", self.scopes[scope].prefix, id_text(node));
        Ok(Some(Source::Output(id, slot)))
    }

    /// The scope opened for subgraph node `node` of scope `scope`.
    fn scope_of_instance(&self, scope: usize, node: &Value) -> Option<usize> {
        self.scopes.iter().position(|s| {
            s.parent
                .is_some_and(|(p, n)| p == scope && id_text(n) == id_text(node))
        })
    }
}

/// Which input of a bypassed node passes through to its output `slot` of type `kind`, as
/// the frontend chooses it: the same slot when its type fits, else the first input of
/// exactly that type.
fn bypass_slot(node: &Value, slot: usize, kind: &str) -> Option<usize> {
    let inputs = node.get("inputs").and_then(Value::as_array)?;
    let type_of = |v: &Value| {
        v.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    if kind == "*" || kind.is_empty() {
        return Some(if inputs.len() > slot { slot } else { 0 });
    }
    let output_type = node
        .get("outputs")
        .and_then(|o| o.get(slot))
        .map(type_of)
        .unwrap_or_default();
    if let Some(opposite) = inputs.get(slot) {
        let t = type_of(opposite);
        if valid_connection(&t, &output_type) && valid_connection(&t, kind) {
            return Some(slot);
        }
    }
    inputs.iter().position(|i| type_of(i) == kind)
}

/// LiteGraph's `isValidConnection`: equal types, a wildcard, or comma-separated lists that
/// share a type (case does not matter).
fn valid_connection(a: &str, b: &str) -> bool {
    let wild = |t: &str| t.is_empty() || t == "*";
    if wild(a) || wild(b) || a == b {
        return true;
    }
    let (a, b) = (a.to_lowercase(), b.to_lowercase());
    if !a.contains(',') && !b.contains(',') {
        return a == b;
    }
    a.split(',')
        .any(|x| b.split(',').any(|y| valid_connection(x, y)))
}

/// The link feeding input `slot` of `node`, if any.
fn input_link(node: &Value, slot: usize) -> Option<i64> {
    node.get("inputs")?.get(slot)?.get("link")?.as_i64()
}

/// The input of subgraph (or group) node `instance` that a subgraph's own input `inner`
/// stands for: the one of the same name (a group node's by position).
fn outer_slot(graph: &Graph, instance: &Value, inner: usize) -> Option<usize> {
    match graph.group {
        true => Some(inner),
        false => graph
            .inputs
            .get(inner)
            .and_then(|name| slot_named(instance, "inputs", name)),
    }
}

/// The links of subgraph input `k` of `graph`, in the order it keeps them (`linkIds`; older
/// saves list none, and the links themselves say it).
fn input_link_ids(graph: &Graph, k: usize) -> Vec<i64> {
    let ids = graph.input_links.get(k).cloned().unwrap_or_default();
    if !ids.is_empty() {
        return ids;
    }
    let mut ids: Vec<i64> = graph
        .links
        .iter()
        .filter(|(_, l)| l.origin == SUBGRAPH_INPUT && l.origin_slot == k)
        .map(|(id, _)| *id)
        .collect();
    ids.sort_unstable();
    ids
}

/// How many of `graph`'s inputs have the name of its input `k`.
fn shares_name(graph: &Graph, k: usize) -> usize {
    graph
        .inputs
        .get(k)
        .map_or(0, |name| graph.inputs.iter().filter(|n| *n == name).count())
}

/// Whether one of a node's inputs named `name` is linked.
fn linked_named(node: &Value, name: &str) -> bool {
    node.get("inputs")
        .and_then(Value::as_array)
        .is_some_and(|inputs| {
            inputs.iter().any(|i| {
                i.get("name").and_then(Value::as_str) == Some(name)
                    && i.get("link").and_then(Value::as_i64).is_some()
            })
        })
}

/// The index of the slot named `name` among a node's `inputs` or `outputs`.
fn slot_named(node: &Value, side: &str, name: &str) -> Option<usize> {
    node.get(side)?
        .as_array()?
        .iter()
        .position(|s| s.get("name").and_then(Value::as_str) == Some(name))
}

/// The value of a subgraph node's promoted widget for its input `slot`, when it has one.
fn promoted_value(instance: &Value, slot: usize) -> Option<Value> {
    let inputs = instance.get("inputs")?.as_array()?;
    let input = inputs.get(slot)?;
    input.get("widget")?;
    // Promoted widgets keep their values in the order of the inputs that carry one.
    let index = inputs[..slot]
        .iter()
        .filter(|i| i.get("widget").is_some())
        .count();
    instance.get("widgets_values")?.get(index).cloned()
}

/// The frontend's dynamic prompt processing of a text widget (`processDynamicPrompt`):
/// comments removed, `{a}` replaced by `a` (nested too), `\{` kept as `{`. A block of
/// several different choices (`{a|b}`) is chosen at random when queueing, which no
/// conversion can repeat: refused.
fn dynamic_prompt(text: &str) -> Result<String, String> {
    dynamic_prompt_at(text, 0)
}

fn dynamic_prompt_at(text: &str, depth: usize) -> Result<String, String> {
    if depth > MAX_BRACES {
        return Err(format!(
            "its text nests {{...}} more than {MAX_BRACES} deep"
        ));
    }
    let input: Vec<char> = strip_comments(text).chars().collect();
    let mut i = 0;
    let mut out = String::new();
    while i < input.len() {
        let c = input[i];
        i += 1;
        match c {
            '\\' => escape(&input, &mut i, &mut out),
            '{' => out.push_str(&choice_block(&input, &mut i, depth)?),
            c => out.push(c),
        }
    }
    Ok(unescape(&out))
}

/// The character after a backslash, kept with it (JavaScript's `"\\" + input[i++]`, which
/// reads `undefined` past the end).
fn escape(input: &[char], i: &mut usize, out: &mut String) {
    out.push('\\');
    match input.get(*i) {
        Some(c) => out.push(*c),
        None => out.push_str("undefined"),
    }
    *i += 1;
}

/// One `{...}` block, after its `{`.
fn choice_block(input: &[char], i: &mut usize, depth: usize) -> Result<String, String> {
    let mut options = Vec::new();
    let mut choice = String::new();
    let mut nested = 0usize;
    if depth >= MAX_BRACES {
        return Err(format!(
            "its text nests {{...}} more than {MAX_BRACES} deep"
        ));
    }
    while *i < input.len() {
        let c = input[*i];
        *i += 1;
        match c {
            '\\' => {
                escape(input, i, &mut choice);
                continue;
            }
            '{' => nested += 1,
            '}' if nested == 0 => break,
            '}' => nested -= 1,
            '|' if nested == 0 => {
                options.push(std::mem::take(&mut choice));
                continue;
            }
            _ => {}
        }
        choice.push(c);
    }
    options.push(choice);
    if options.iter().any(|o| *o != options[0]) {
        return Err(format!(
            "its text has a choice of {} ({{{}}}), which the frontend makes at random when it queues",
            options.len(),
            options.join("|")
        ));
    }
    dynamic_prompt_at(&options[0], depth + 1)
}

/// `\{`, `\}` and `\|` as the characters themselves.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(&n) = chars.peek()
            && matches!(n, '{' | '}' | '|')
        {
            out.push(n);
            chars.next();
            continue;
        }
        out.push(c);
    }
    out
}

/// `text` without `/* ... */` and `// ...` (to the end of the line), as the frontend's
/// `/\/\*[\s\S]*?\*\/|\/\/.*/g` removes them.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let block = rest.find("/*");
        let line = rest.find("//");
        match (block, line) {
            (Some(b), l) if l.is_none_or(|l| b < l) => {
                out.push_str(&rest[..b]);
                match rest[b + 2..].find("*/") {
                    Some(end) => rest = &rest[b + 2 + end + 2..],
                    None => {
                        // Unclosed: the pattern's other half may still match a `//` in it.
                        match rest[b..].find("//") {
                            Some(l) => {
                                out.push_str(&rest[b..b + l]);
                                rest = &rest[b + l..];
                                let end = rest
                                    .find(['\n', '\r', '\u{2028}', '\u{2029}'])
                                    .unwrap_or(rest.len());
                                rest = &rest[end..];
                            }
                            None => {
                                out.push_str(&rest[b..]);
                                return out;
                            }
                        }
                    }
                }
            }
            (_, Some(l)) => {
                out.push_str(&rest[..l]);
                rest = &rest[l..];
                let end = rest
                    .find(['\n', '\r', '\u{2028}', '\u{2029}'])
                    .unwrap_or(rest.len());
                rest = &rest[end..];
            }
            (None, None) => {
                out.push_str(rest);
                return out;
            }
            (Some(_), None) => unreachable!("handled by the first arm"),
        }
    }
}

/// An array value is wrapped, so ComfyUI does not take it for a link.
fn wrap(v: Value) -> Value {
    match v {
        Value::Array(_) => json!({ "__value__": v }),
        v => v,
    }
}

/// Inputs linked to nodes that are not sent (muted ones) are dropped, as the frontend does.
fn drop_links_to_left_out(out: &mut Map<String, Value>) {
    let ids: std::collections::HashSet<String> = out.keys().cloned().collect();
    for entry in out.values_mut() {
        if let Some(inputs) = entry.get_mut("inputs").and_then(Value::as_object_mut) {
            inputs.retain(|_, v| match v.as_array() {
                Some(a) if a.len() == 2 => a[0].as_str().is_some_and(|id| ids.contains(id)),
                _ => true,
            });
        }
    }
}

/// The insides of the legacy group nodes in `extra.groupNodes`, as graphs of their own: the
/// inner nodes numbered by their `index` (the frontend sends them as `group:index`), links
/// between them, and the group node's inputs and outputs by position. Its inputs are the inner
/// inputs no inner link feeds (widgets aside), in order; its outputs the inner outputs no inner
/// link takes, and those listed as `external`.
fn group_graphs(doc: &Value, defs: &NodeDefs) -> Result<Vec<(String, Value)>, String> {
    let Some(groups) = doc.pointer("/extra/groupNodes").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (name, def) in groups {
        let nodes: Vec<Value> = def
            .get("nodes")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("the group node {name} has no nodes"))?
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut n = n.clone();
                let index = n.get("index").and_then(Value::as_i64).unwrap_or(i as i64);
                let inputs_ok = n
                    .get("inputs")
                    .is_none_or(|i| i.as_array().is_some_and(|a| a.iter().all(Value::is_object)));
                match n.as_object_mut() {
                    Some(o) if inputs_ok => {
                        o.insert("id".into(), json!(index));
                        Ok(n)
                    }
                    _ => Err(format!("a node inside the group node {name} is not a node")),
                }
            })
            .collect::<Result<_, String>>()?;
        let links: Vec<&Value> = def
            .get("links")
            .and_then(Value::as_array)
            .map(|l| l.iter().collect())
            .unwrap_or_default();
        let field = |l: &Value, i: usize| l.get(i).and_then(Value::as_i64);
        let internal = |target: i64, slot: i64| {
            links.iter().any(|l| {
                field(l, 0).is_some() && field(l, 2) == Some(target) && field(l, 3) == Some(slot)
            })
        };
        let taken = |origin: i64, slot: i64| {
            links
                .iter()
                .any(|l| field(l, 0) == Some(origin) && field(l, 1) == Some(slot))
        };
        let external: Vec<(i64, i64)> = def
            .get("external")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| Some((field(e, 0)?, field(e, 1)?)))
            .collect();
        let mut all_links = Vec::new();
        let mut next_id = 1_000_000i64;
        let mut add = |origin: i64, oslot: i64, target: i64, tslot: i64, kind: &str| {
            next_id += 1;
            json!({"id": next_id, "origin_id": origin, "origin_slot": oslot,
                   "target_id": target, "target_slot": tslot, "type": kind})
        };
        for l in &links {
            if let (Some(o), Some(os), Some(t), Some(ts)) =
                (field(l, 0), field(l, 1), field(l, 2), field(l, 3))
            {
                let kind = l.get(5).and_then(Value::as_str).unwrap_or("");
                all_links.push(add(o, os, t, ts, kind));
            }
        }
        let (mut input_k, mut output_k) = (0i64, 0i64);
        let mut nodes = nodes;
        for n in nodes.iter_mut() {
            let index = n["id"].as_i64().unwrap_or(0);
            let class = kind_of(n).to_string();
            let slots = n
                .get("inputs")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for (slot, input) in slots.iter().enumerate() {
                if input.get("widget").is_some() || internal(index, slot as i64) {
                    continue;
                }
                let kind = input
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let link = add(SUBGRAPH_INPUT, input_k, index, slot as i64, &kind);
                n["inputs"][slot]["link"] = link["id"].clone();
                all_links.push(link);
                input_k += 1;
            }
            // Links inside the group, on the inputs they feed.
            for l in &all_links {
                if l["target_id"].as_i64() == Some(index)
                    && l["origin_id"].as_i64() != Some(SUBGRAPH_INPUT)
                    && let Some(slot) = l["target_slot"].as_u64()
                    && n["inputs"].get(slot as usize).is_some()
                {
                    n["inputs"][slot as usize]["link"] = l["id"].clone();
                }
            }
            let outputs = match n.get("outputs").and_then(Value::as_array) {
                Some(o) => o.len(),
                None => defs.output_count(&class),
            };
            for slot in 0..outputs as i64 {
                if !taken(index, slot) || external.contains(&(index, slot)) {
                    let kind = n
                        .pointer(&format!("/outputs/{slot}/type"))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    all_links.push(add(index, slot, SUBGRAPH_OUTPUT, output_k, &kind));
                    output_k += 1;
                }
            }
        }
        out.push((
            name.clone(),
            json!({"nodes": nodes, "links": all_links, "group": true}),
        ));
    }
    Ok(out)
}

/// Reads one graph's nodes and links (links as arrays, or as objects in subgraphs and the
/// newer format).
fn graph(doc: &Value) -> Result<Graph<'_>, String> {
    let nodes: Vec<&Value> = doc
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or("it has no list of nodes")?
        .iter()
        .collect();
    let mut by_id = HashMap::new();
    for n in &nodes {
        let id = n
            .get("id")
            .and_then(Value::as_i64)
            .ok_or("a node has no numeric id")?;
        by_id.insert(id, *n);
    }
    let mut links = HashMap::new();
    for l in doc
        .get("links")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let link = match l {
            Value::Array(a) if a.len() >= 5 => (|| {
                Some((
                    a[0].as_i64()?,
                    Link {
                        origin: a[1].as_i64()?,
                        origin_slot: a[2].as_u64()? as usize,
                        target: a[3].as_i64()?,
                        target_slot: a[4].as_u64()? as usize,
                        kind: type_text(a.get(5)),
                    },
                ))
            })(),
            Value::Object(o) => (|| {
                Some((
                    o.get("id")?.as_i64()?,
                    Link {
                        origin: o.get("origin_id")?.as_i64()?,
                        origin_slot: o.get("origin_slot")?.as_u64()? as usize,
                        target: o.get("target_id")?.as_i64()?,
                        target_slot: o.get("target_slot")?.as_u64()? as usize,
                        kind: type_text(o.get("type")),
                    },
                ))
            })(),
            _ => None,
        };
        if let Some((id, link)) = link {
            links.insert(id, link);
        }
    }
    let names = |key: &str| -> Vec<String> {
        doc.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|io| {
                io.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    };
    Ok(Graph {
        nodes,
        by_id,
        links,
        inputs: names("inputs"),
        input_links: doc
            .get("inputs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|io| {
                io.get("linkIds")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_i64)
                    .collect()
            })
            .collect(),
        outputs: names("outputs"),
        group: doc.get("group").and_then(Value::as_bool).unwrap_or(false),
    })
}

fn type_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) if n.as_i64() == Some(0) => "*".into(),
        _ => String::new(),
    }
}

fn kind_of(node: &Value) -> &str {
    node.get("type").and_then(Value::as_str).unwrap_or_default()
}

fn mode(node: &Value) -> i64 {
    node.get("mode").and_then(Value::as_i64).unwrap_or(0)
}

fn id_text(node: &Value) -> String {
    match node.get("id") {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    }
}

fn refusal(node: &Value, reason: &str) -> Refusal {
    let title = node
        .get("title")
        .and_then(Value::as_str)
        .map(|t| format!(" \"{t}\""))
        .unwrap_or_default();
    Refusal {
        node: format!("node {}{title} ({})", id_text(node), kind_of(node)),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests;
