//! Tests on one line of text: what a frame, a bar or a glued timestamp is.

use super::{MAX_TEXT, StartState, TAIL};
use crate::classify::catalogue;
use crate::classify::normalize::normalize;
use crate::logscan::lines;
use crate::logscan::reader::Before;
use crate::outcome::Outcome;
use regex::Regex;
use std::borrow::Cow;
use std::sync::OnceLock;

/// Removes the timestamps some ComfyUI-Manager versions glue into the middle and end of lines
/// (`Prompt executed in 3.21 seconds2025-01-16T20:49:52.176503 - `): they time-stamp every
/// write, and `print` writes its parts separately.
pub(super) fn unglue(text: &str) -> Cow<'_, str> {
    static RE: OnceLock<Regex> = OnceLock::new();
    if !text.contains(" - ") {
        return Cow::Borrowed(text);
    }
    let re = RE.get_or_init(|| Regex::new(crate::logscan::joins::GLUED).expect("timestamp regex"));
    let out = re.replace_all(text, "");
    match out {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        Cow::Owned(s) => Cow::Owned(s.trim_end().to_string()),
    }
}

/// Memory errors that a prompt can log and still finish (TensorRT's allocator, comfy-aimdo's
/// error lines): the classifier weighs those against the success.
pub(super) fn succeeds_despite(hit: &str) -> bool {
    // comfy-aimdo logs its errors and carries on (`aimdo: …:ERROR: hostbuf_grow …`).
    if hit.starts_with("aimdo: ") {
        return true;
    }
    catalogue::match_line(hit)
        .all(|s| matches!(s.outcome, Outcome::TensorrtAllocator | Outcome::AimdoFault))
}

/// A start marker's bit in [`StartState::seen`] (`u8::MAX` is the ready line, not a marker).
pub(super) fn rank_bit(rank: u8) -> u32 {
    if rank < 32 { 1 << rank } else { 0 }
}

/// A traceback frame in ComfyUI's or PyTorch's code: enough to read a pasted fragment.
pub(super) fn comfy_or_torch_frame(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("File \"")
        && t.contains("\", line ")
        && ["comfy", "ComfyUI", "torch", "execution.py", "nodes.py"]
            .iter()
            .any(|w| t.contains(w))
}

/// A tqdm bar and nothing after it (trailing blanks and colour codes aside), from its raw bytes.
pub(super) fn only_a_bar(raw: &[u8]) -> bool {
    let mut end = raw;
    loop {
        end = end.trim_ascii_end();
        // A closing colour code: `ESC [ digits/; m`.
        match memchr::memrchr(0x1b, end) {
            Some(i)
                if end.len() - i >= 3
                    && end[i + 1] == b'['
                    && end[end.len() - 1] == b'm'
                    && end[i + 2..end.len() - 1]
                        .iter()
                        .all(|b| b.is_ascii_digit() || *b == b';') =>
            {
                end = &end[..i];
            }
            _ => break,
        }
    }
    end.ends_with(b"it/s]") || end.ends_with(b"s/it]")
}

/// A frame of ComfyUI's executor running a prompt (not its import, nor the validation of a
/// POST whose traceback an `Error handling request` line heads): its node frames, the
/// executor's own loop (`execute_async`, whose uncaught exception kills the prompt worker
/// thread). `main.py`'s `prompt_worker` alone is not: it also runs after a prompt ended
/// (`q.task_done(…)`).
pub(super) fn executor_frame(text: &str) -> bool {
    let t = text.trim_end();
    t.contains("execution.py\", line ")
        && [
            " in execute",
            " in execute_async",
            " in recursive_execute",
            " in get_output_data",
            " in map_node_over_list",
            " in _map_node_over_list",
            " in _async_map_node_over_list",
            " in process_inputs",
        ]
        .iter()
        .any(|f| t.ends_with(f))
}

/// A frame of code that runs only in a prompt, outside an import: a node's function (in
/// `custom_nodes`, ComfyUI-Manager's aside: it runs its own threads and routes) or the
/// model's and sampler's code.
pub(super) fn prompt_code_frame(text: &str) -> bool {
    let t = text.trim();
    if !t.starts_with("File \"") || import_time_frame(t) {
        return false;
    }
    // A traceback's frame (`line 20, in f`), outermost first; not a faulthandler dump's
    // (`line 20 in f`), innermost first.
    let Some((path, rest)) = t["File \"".len()..].split_once('"') else {
        return false;
    };
    if !rest.split_once(", in ").is_some_and(|(line, _)| {
        line.trim_start_matches(", line ")
            .bytes()
            .all(|b| b.is_ascii_digit())
    }) {
        return false;
    }
    let path = path.replace('\\', "/");
    let lower = path.to_ascii_lowercase();
    if lower.contains("/custom_nodes/") {
        return !lower.contains("manager") && !lower.ends_with("/__init__.py");
    }
    [
        "/comfy/ldm/",
        "/comfy/k_diffusion/",
        "/comfy/samplers.py",
        "/comfy/sample.py",
        "/comfy/model_base.py",
        "/comfy/sd.py",
        "/comfy/sd1_clip.py",
        "/comfy/text_encoders/",
        "/comfy_extras/",
    ]
    .iter()
    .any(|w| path.contains(w))
}

/// A frame of code run while ComfyUI starts: a module's top level (`in <module>`; after a
/// `,` in a traceback, without one in a faulthandler stack) or ComfyUI's custom-node loader
/// (`nodes.py`).
pub(super) fn import_time_frame(text: &str) -> bool {
    let t = text.trim_end();
    [
        " in <module>",
        " in load_custom_node",
        " in init_external_custom_nodes",
        " in init_extra_nodes",
        " in init_builtin_extra_nodes",
    ]
    .iter()
    .any(|f| t.ends_with(f))
}

/// `Total VRAM …` again right after the `[Prompt Server] web root` line of a start that has
/// not failed: ComfyUI 0.3.7x and 0.4 print the device block a second time there (its memory
/// module imported twice), in the same start.
pub(super) fn repeated_device_block(s: &StartState, before: &Before<'_>) -> bool {
    s.starting()
        && !(s.traceback || s.dead || s.argparse)
        && before
            .last(1)
            .first()
            .is_some_and(|prev| normalize(prev).text.contains("[Prompt Server] web root: "))
}

/// Shortens a line for keeping (at a character boundary).
pub(super) fn clip(text: &str) -> String {
    let t = text.trim_end();
    match t.char_indices().nth(MAX_TEXT) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_string(),
    }
}

/// The last lines before a point, normalised, without launcher command lines.
pub(super) fn tail_lines(before: &Before<'_>) -> Vec<String> {
    before
        .last(TAIL + 2)
        .iter()
        .map(|raw| clip(&unglue(&normalize(raw).text)))
        .filter(|t| {
            // Python's carets under a traceback's code line point at nothing in an excerpt.
            let marks = t.trim().trim_matches(|c| matches!(c, '^' | '~' | ' '));
            !t.trim().is_empty() && !marks.is_empty() && lines::launch_args(t).is_none()
        })
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .take(TAIL)
        .rev()
        .collect()
}

/// The count of the progress bar among the few lines before this point, the nearest first:
/// (done, total).
pub(super) fn last_bar(before: &Before<'_>) -> Option<(u64, u64)> {
    before
        .last(4)
        .iter()
        .rev()
        .find(|l| lines::is_progress(l))
        .and_then(|l| lines::bar_count(l))
}

/// Whether a progress bar follows the load request in the lines before this point: sampling
/// ran, so the model was loaded even though its `prepared for dynamic VRAM` line is missing
/// (it drops to DEBUG when it repeats, `comfy/model_management.py`).
pub(super) fn sampled_after(before: &Before<'_>, load: &str) -> bool {
    let recent: Vec<String> = before
        .last(8)
        .iter()
        .map(|raw| clip(&unglue(&normalize(raw).text)))
        .collect();
    let after = recent.iter().rposition(|l| l == load).map_or(0, |i| i + 1);
    recent[after..].iter().any(|l| lines::is_progress(l))
}
