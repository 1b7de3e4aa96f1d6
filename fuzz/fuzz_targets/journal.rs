//! The resume journal.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let entries = vrambisect::bisect::session::parse_journal(&String::from_utf8_lossy(data));
    let _ = vrambisect::bisect::session::tallies(&entries);
});
