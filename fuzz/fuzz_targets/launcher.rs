//! The launcher reader: any .bat or .sh file.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let extra = vec!["--lowvram".to_string()];
    let _ = vrambisect::launcher::parse_bat(&text, &extra);
    let _ = vrambisect::launcher::parse_sh(&text, &extra);
});
