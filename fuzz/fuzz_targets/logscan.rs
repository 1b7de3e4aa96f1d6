//! logscan over any bytes; the fast path must agree with reading every line.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vrambisect::logscan::{reader::Mode, scan_bytes};

fuzz_target!(|data: &[u8]| {
    let fast = scan_bytes("fuzz.log", data, Mode::Prefilter)
        .ok()
        .map(|r| serde_json::to_value(r).unwrap());
    let slow = scan_bytes("fuzz.log", data, Mode::EveryLine)
        .ok()
        .map(|r| serde_json::to_value(r).unwrap());
    assert_eq!(fast, slow);
});
