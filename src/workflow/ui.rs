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
//!   followed across its edges.
//!
//! What cannot be converted with certainty (a class this install lacks, a widget count that
//! does not match the definition, a random choice in a dynamic prompt) is refused, naming the
//! node: nothing is guessed.

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

/// Whether `doc` is a UI-format workflow (nodes and links, not `{id: {class_type, inputs}}`).
pub fn is_ui_format(doc: &Value) -> bool {
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
    outputs: Vec<String>,
}

/// A graph where it is used: the root, or inside a subgraph node (whose id prefixes the ids
/// of the nodes inside it).
struct Scope<'a> {
    graph: &'a Graph<'a>,
    prefix: String,
    /// The scope holding the subgraph node, and that node.
    parent: Option<(usize, &'a Value)>,
}

/// What an input resolves to.
enum Source {
    Output(String, usize),
    Value(Value),
}

/// Converts a UI-format workflow with the node definitions of the install it will run on.
pub fn convert(doc: &Value, defs: &NodeDefs) -> Result<Map<String, Value>, Refusal> {
    let whole = |reason: String| Refusal {
        node: "the workflow".into(),
        reason,
    };
    let root = graph(doc).map_err(whole)?;
    let mut subgraphs: HashMap<String, Graph> = HashMap::new();
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
    Ok(out)
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
}

impl<'a> Converter<'a> {
    /// Whether scope `i` is inside a muted subgraph node. (Frontend 1.27 still sends what is
    /// inside a bypassed one, though links through it pass it by.)
    fn inside_left_out(&self, mut i: usize) -> bool {
        while let Some((parent, node)) = self.scopes[i].parent {
            if mode(node) == MUTED {
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
        if class.starts_with("workflow>") || class.starts_with("workflow/") {
            return Err(refusal(
                node,
                "it is a legacy group node, which this tool does not convert: in ComfyUI convert it to a subgraph, or use Export (API)",
            ));
        }
        if !self.defs.has(class) {
            return Err(refusal(
                node,
                &format!(
                    "this ComfyUI has no node class {class} (a custom node not installed here?)"
                ),
            ));
        }
        let widgets = self.defs.widgets(class).map_err(|r| refusal(node, &r))?;
        let mut inputs = self.widget_inputs(scope, node, &widgets)?;
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
                    let widget = widgets.iter().find(|w| w.name == name);
                    inputs.insert(name.to_string(), wrap(self.widget_value(node, widget, v)?));
                }
                None => {}
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

    /// The values of a node's widgets that are sent, by input name.
    fn widget_inputs(
        &self,
        _scope: usize,
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
        if let Some(values) = saved
            && values.len() != widgets.len()
        {
            return Err(refusal(
                node,
                &format!(
                    "it has {} widget values where this ComfyUI's definition makes {} widgets (saved by another version of the node, or a custom node's frontend changed them)",
                    values.len(),
                    widgets.len()
                ),
            ));
        }
        let mut out = Map::new();
        for (i, w) in widgets.iter().enumerate() {
            if !w.serialized {
                continue;
            }
            // No values saved: the widgets start at their defaults, as a new node's do.
            let value = match (&w.fixed, saved) {
                (Some(fixed), _) => fixed.clone(),
                (None, Some(values)) => values[i].clone(),
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

    /// A widget's value as the frontend sends it: a dynamic prompt processed.
    fn widget_value(&self, node: &Value, w: Option<&Widget>, v: Value) -> Result<Value, Refusal> {
        match (w, &v) {
            (Some(w), Value::String(text)) if w.dynamic_prompts => dynamic_prompt(text)
                .map(Value::String)
                .map_err(|r| refusal(node, &r)),
            _ => Ok(v),
        }
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
        let Some(link) = node
            .get("inputs")
            .and_then(|i| i.get(slot))
            .and_then(|i| i.get("link"))
            .and_then(Value::as_i64)
            .and_then(|l| graph.links.get(&l))
        else {
            return Ok(None);
        };
        if link.origin == SUBGRAPH_INPUT {
            // Across the subgraph's edge, to what feeds the subgraph node there.
            let Some((parent, instance)) = self.scopes[scope].parent else {
                return Ok(None);
            };
            let Some(outer) = graph
                .inputs
                .get(link.origin_slot)
                .and_then(|name| slot_named(instance, "inputs", name))
            else {
                return Ok(None);
            };
            return match instance
                .get("inputs")
                .and_then(|i| i.get(outer))
                .and_then(|i| i.get("link"))
                .and_then(Value::as_i64)
            {
                Some(_) => self.resolve_input(parent, instance, outer, depth + 1),
                None => Ok(promoted_value(instance, outer).map(Source::Value)),
            };
        }
        let Some(origin) = graph.by_id.get(&link.origin) else {
            return Ok(None);
        };
        self.resolve_output(scope, origin, link.origin_slot, &link.kind, depth + 1)
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
            let inner_slot = graph.outputs.iter().position(|n| n == name).unwrap_or(slot);
            let Some(link) = graph
                .links
                .values()
                .find(|l| l.target == SUBGRAPH_OUTPUT && l.target_slot == inner_slot)
            else {
                return Ok(None);
            };
            if link.origin == SUBGRAPH_INPUT {
                let Some(outer) = graph
                    .inputs
                    .get(link.origin_slot)
                    .and_then(|n| slot_named(node, "inputs", n))
                else {
                    return Ok(None);
                };
                return match node
                    .get("inputs")
                    .and_then(|i| i.get(outer))
                    .and_then(|i| i.get("link"))
                    .and_then(Value::as_i64)
                {
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
    let input: Vec<char> = strip_comments(text).chars().collect();
    let mut i = 0;
    let mut out = String::new();
    while i < input.len() {
        let c = input[i];
        i += 1;
        match c {
            '\\' => escape(&input, &mut i, &mut out),
            '{' => out.push_str(&choice_block(&input, &mut i)?),
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
fn choice_block(input: &[char], i: &mut usize) -> Result<String, String> {
    let mut options = Vec::new();
    let mut choice = String::new();
    let mut depth = 0usize;
    while *i < input.len() {
        let c = input[*i];
        *i += 1;
        match c {
            '\\' => {
                escape(input, i, &mut choice);
                continue;
            }
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            '|' if depth == 0 => {
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
    dynamic_prompt(&options[0])
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
                                let end = rest.find('\n').unwrap_or(rest.len());
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
        outputs: names("outputs"),
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
