//! The prompt ComfyUI puts inside what it saves. Its save nodes write the API prompt (and the
//! UI workflow) as JSON text into the file's metadata: PNG text chunks (and APNG's `comf`
//! chunks), WebP's EXIF (`prompt:{...}`), FLAC and Opus comments (`prompt={...}`), MP3's ID3
//! `TXXX` frames, MP4's `mdta` items, Matroska/WebM tags; VideoHelperSuite writes an ffmpeg
//! `comment` of `{"prompt": "...", "workflow": ...}` or the keys themselves, the JSON
//! sometimes encoded twice. All of these keep the JSON as plain UTF-8 bytes, so the file is
//! searched for JSON objects (and JSON strings holding one) rather than parsed per container;
//! Ogg pages are joined first, since a long comment spans several.

use serde_json::Value;

/// What a file holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Found {
    /// An API prompt (`{id: {class_type, inputs}}`).
    Api(Value),
    /// Only the UI workflow.
    Ui(Value),
}

/// The kind of media file `bytes` is, when it is one ComfyUI writes.
pub(crate) fn media_kind(bytes: &[u8]) -> Option<&'static str> {
    let at = |offset: usize, magic: &[u8]| bytes.get(offset..offset + magic.len()) == Some(magic);
    if at(0, b"\x89PNG\r\n\x1a\n") {
        Some("PNG image")
    } else if at(0, b"RIFF") && at(8, b"WEBP") {
        Some("WebP image")
    } else if at(0, b"fLaC") {
        Some("FLAC audio")
    } else if at(0, b"ID3") {
        // ComfyUI's MP3s start with their ID3 tag (a bare frame sync would also match a
        // UTF-16 byte-order mark).
        Some("MP3 audio")
    } else if at(0, b"OggS") {
        Some("Ogg (Opus) audio")
    } else if at(4, b"ftyp") {
        Some("MP4 video")
    } else if at(0, b"\x1a\x45\xdf\xa3") {
        Some("WebM/Matroska video")
    } else if at(0, b"GIF8") || at(0, b"\xff\xd8\xff") {
        Some("image")
    } else {
        None
    }
}

/// Why a PNG cannot be trusted whole: it ends before its `IEND` chunk.
pub(crate) fn png_cut_short(bytes: &[u8]) -> bool {
    let mut at = 8usize;
    loop {
        let Some(head) = bytes.get(at..at + 8) else {
            return true;
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let end = at + 12 + len;
        if end > bytes.len() {
            return true;
        }
        if &head[4..8] == b"IEND" {
            return false;
        }
        at = end;
    }
}

/// The prompt in a media file: the API prompt when there is one, else the UI workflow.
pub(crate) fn find(bytes: &[u8]) -> Option<Found> {
    if bytes.starts_with(b"OggS") {
        // Pages joined; the raw bytes too, should the pages not join up.
        let found = scan(&ogg_payload(bytes));
        if matches!(found, Some(Found::Api(_))) {
            return found;
        }
        return scan(bytes).or(found);
    }
    scan(bytes)
}

/// The JSON objects of `bytes`, searched for a prompt. The parser's work is bounded: a cut or
/// hostile file whose every `{"` starts an object that never ends would otherwise be read to
/// its end once per start.
fn scan(bytes: &[u8]) -> Option<Found> {
    let mut budget = bytes.len().saturating_mul(2).saturating_add(8 << 20);
    let mut ui = None;
    let mut i = 0;
    while i + 1 < bytes.len() {
        let start = matches!((bytes[i], bytes[i + 1]), (b'{', b'"') | (b'"', b'{'));
        if !start {
            i += 1;
            continue;
        }
        let mut stream = serde_json::Deserializer::from_slice(&bytes[i..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(v)) => {
                let used = stream.byte_offset();
                budget = budget.saturating_sub(used);
                match classify(&v, 0) {
                    Some(Found::Api(p)) => return Some(Found::Api(p)),
                    Some(Found::Ui(w)) if ui.is_none() => ui = Some(w),
                    _ => {}
                }
                i += used.max(1);
            }
            Some(Err(e)) => {
                budget = budget.saturating_sub(error_offset(&bytes[i..], e.line(), e.column()));
                i += 1;
            }
            None => i += 1,
        }
        if budget == 0 {
            break;
        }
    }
    ui.map(Found::Ui)
}

/// How far into `bytes` the parser got before its error at `line`, `column` (1-based).
fn error_offset(bytes: &[u8], line: usize, column: usize) -> usize {
    let mut at = 0;
    for _ in 1..line {
        match bytes[at..].iter().position(|&b| b == b'\n') {
            Some(n) => at += n + 1,
            None => return bytes.len(),
        }
    }
    (at + column).min(bytes.len())
}

/// What a JSON value found in a file is.
fn classify(v: &Value, depth: usize) -> Option<Found> {
    if depth > 3 {
        return None;
    }
    match v {
        // JSON inside a JSON string (written twice over).
        Value::String(s) if s.trim_start().starts_with('{') => {
            classify(&serde_json::from_str::<Value>(s).ok()?, depth + 1)
        }
        Value::Object(o) => {
            if is_api(o) {
                return Some(Found::Api(v.clone()));
            }
            if crate::workflow::ui::is_ui_format(v) {
                return Some(Found::Ui(v.clone()));
            }
            // `{"prompt": ..., "workflow": ...}`: the API prompt first.
            let api = o.get("prompt").and_then(|p| classify(p, depth + 1));
            if let Some(Found::Api(p)) = api {
                return Some(Found::Api(p));
            }
            o.get("workflow")
                .and_then(|w| classify(w, depth + 1))
                .or(api)
        }
        _ => None,
    }
}

/// Every value is a node: `{class_type, inputs}`.
fn is_api(o: &serde_json::Map<String, Value>) -> bool {
    !o.is_empty()
        && o.values().all(|n| {
            n.get("class_type").is_some_and(Value::is_string)
                && n.get("inputs").is_none_or(Value::is_object)
        })
}

/// The payloads of an Ogg file's pages, joined (page headers removed), so that a comment
/// spanning pages is whole again.
fn ogg_payload(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while bytes.get(at..at + 4) == Some(b"OggS") {
        let Some(&segments) = bytes.get(at + 26) else {
            break;
        };
        let table = at + 27;
        let Some(lacing) = bytes.get(table..table + segments as usize) else {
            break;
        };
        let len: usize = lacing.iter().map(|&b| b as usize).sum();
        let body = table + segments as usize;
        let Some(payload) = bytes.get(body..body + len) else {
            out.extend_from_slice(&bytes[body.min(bytes.len())..]);
            break;
        };
        out.extend_from_slice(payload);
        at = body + len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Equal JSON, numbers by value (ComfyUI saves an `fps` of 4 as 4.0).
    fn same(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
            }
            _ => a == b,
        }
    }

    fn media(name: &str) -> Vec<u8> {
        std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/media")
                .join(name),
        )
        .unwrap()
    }

    /// Every file ComfyUI's save nodes (and VideoHelperSuite's ffmpeg call) wrote gives back
    /// exactly the API prompt that was queued to make it.
    #[test]
    fn the_prompt_inside_every_kind_of_output_is_found() {
        let list: Value = serde_json::from_slice(&media("media.json")).unwrap();
        let mut seen = 0;
        for m in list.as_array().unwrap() {
            let (Some(file), Some(prompt)) = (m["file"].as_str(), m["prompt_file"].as_str()) else {
                continue;
            };
            if file.starts_with("truncated") {
                continue;
            }
            let bytes = media(file);
            assert!(media_kind(&bytes).is_some(), "{file}: not recognised");
            let expected: Value = serde_json::from_slice(&media(prompt)).unwrap();
            match find(&bytes) {
                Some(Found::Api(p)) => assert!(same(&p, &expected), "{file}: {p}"),
                other => panic!("{file}: {other:?}"),
            }
            seen += 1;
        }
        assert!(seen >= 15, "{seen} files");
    }

    #[test]
    fn a_hostile_or_cut_file_is_searched_in_bounded_work() {
        // Every start of an object or string that never ends, a quarter megabyte of them.
        let mut hostile = b"RIFF\0\0\0\0WEBP".to_vec();
        hostile.extend(b"\"{\\\"".repeat(90_000));
        assert_eq!(find(&hostile), None);
        let mut cut = b"fLaC".to_vec();
        cut.extend(b"{\"a\": ".repeat(40_000));
        assert_eq!(find(&cut), None);
    }

    #[test]
    fn an_image_without_a_prompt_and_a_cut_png_are_told() {
        let plain = media("plain_no_metadata.png");
        assert_eq!(find(&plain), None);
        assert!(!png_cut_short(&plain));
        assert!(png_cut_short(&media("truncated_40pct_png_small.png")));
        assert!(png_cut_short(&media(
            "truncated_40pct_png_large_prompt.png"
        )));
        assert!(!png_cut_short(&media("comfyui_png_small.png")));
    }
}
