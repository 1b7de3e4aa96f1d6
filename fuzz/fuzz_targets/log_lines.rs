//! The log normaliser, the startup reader and the classifier, over any log text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vrambisect::classify::{self, ExitInfo, PromptEnd, PromptObservation, normalize::normalize};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut facts = vrambisect::startup::StartupFacts::default();
    let lines: Vec<String> = text.split('\n').map(|l| normalize(l).text).collect();
    for l in &lines {
        facts.observe(l);
    }
    facts.finish();
    let _ = classify::classify_startup(
        ExitInfo {
            code: Some(2),
            signal: None,
        },
        &lines,
    );
    let obs = PromptObservation {
        end: Some(PromptEnd::Success),
        log: lines,
        ..Default::default()
    };
    let _ = classify::classify_prompt(&obs);
});
