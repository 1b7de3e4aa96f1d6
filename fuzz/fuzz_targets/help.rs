//! The `--help` parser, and the argparse emulation over what it finds.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(set) = vrambisect::flags::help::parse(&text) {
        let args: Vec<String> = text
            .split_whitespace()
            .take(16)
            .map(str::to_string)
            .collect();
        let parsed = vrambisect::flags::argparse::parse(&set, &args, None);
        assert_eq!(parsed.accepted(), parsed.error.is_none());
    }
});
