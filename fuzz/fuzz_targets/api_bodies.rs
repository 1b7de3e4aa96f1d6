//! HTTP bodies: /history (how a prompt ended) and /prompt 400 answers.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        if let Some(id) = v.as_object().and_then(|o| o.keys().next().cloned()) {
            let _ = vrambisect::comfy::end_from_history(&v, &id);
        }
        let _ = vrambisect::comfy::rejection_lines(&v);
    }
});
