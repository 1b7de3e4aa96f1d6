//! The workflow loader: any bytes a user may pass as --workflow.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(w) = vrambisect::workflow::Workflow::parse(&text) {
        let _ = w.for_iteration(2);
    }
});
