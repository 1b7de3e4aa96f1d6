//! Websocket frame decoding.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = vrambisect::comfy::events::decode(&String::from_utf8_lossy(data));
});
