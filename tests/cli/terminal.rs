//! vrambisect in a real (pseudo-)terminal, as a person runs it: the README's main command
//! finishes and shows its verdict, and Ctrl-C typed at the terminal ends a bisect cleanly.
//! Pipes hide what a terminal shows (a progress thread that draws to stderr, a table that
//! wraps to the terminal's width), so these run the binary on a pty.

use crate::support;

use std::time::Duration;
use support::comfy::FakeComfy;
use support::pty::Pty;

/// The README's main command on `install`, its session in `session`.
fn readme_bisect(install: &FakeComfy, session: &std::path::Path) -> std::process::Command {
    let mut cmd = support::vrambisect();
    cmd.env_remove("NO_COLOR")
        .env("TERM", "xterm-256color")
        .args([
            "bisect",
            "--comfyui",
            install.path_str(),
            "--workflow",
            support::fixture("workflows/sd15_txt2img.json")
                .to_str()
                .unwrap(),
            "--output",
            session.to_str().unwrap(),
        ]);
    cmd
}

fn readme_bisect_finishes_on(cols: u16, rows: u16) -> String {
    let install = FakeComfy::readme();
    let tmp = tempfile::tempdir().unwrap();
    let mut pty = Pty::spawn(readme_bisect(&install, &tmp.path().join("s")), cols, rows);
    let code = pty.exit_code(Duration::from_secs(60));
    let screen = pty.text();
    assert_eq!(code, 0, "{screen}");
    assert!(screen.contains("FIXED BY"), "{screen}");
    assert!(screen.contains("--disable-dynamic-vram"), "{screen}");
    install.assert_nothing_left();
    screen
}

#[test]
fn the_readme_bisect_finishes_in_a_sized_terminal() {
    let screen = readme_bisect_finishes_on(120, 40);
    // The table fits the terminal: its configuration column is not wrapped.
    assert!(
        screen
            .lines()
            .any(|l| l.contains("| --disable-dynamic-vram ") && l.chars().count() <= 120),
        "{screen}"
    );
}

#[test]
fn a_narrow_terminal_wraps_the_table_between_flags_never_inside_one() {
    let screen = readme_bisect_finishes_on(60, 60);
    // Every flag of the configurations stands whole on one line of the table.
    for flag in [
        "--disable-pinned-memory,",
        "--disable-async-offload,",
        "--disable-nvml-pressure,",
    ] {
        assert!(
            screen
                .lines()
                .any(|l| l.starts_with('|') && l.contains(&format!("| {flag}"))),
            "{flag} is split:\n{screen}"
        );
    }
    // A flag and its value stay on one line too.
    assert!(
        screen.lines().any(|l| l
            .split_once("| --vram-headroom ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|v| v.parse::<f64>().is_ok())),
        "--vram-headroom is parted from its value:\n{screen}"
    );
}

#[test]
fn the_readme_bisect_finishes_in_a_terminal_that_reports_no_size() {
    let screen = readme_bisect_finishes_on(0, 0);
    // A width of 0 is "unknown", not "wrap everything to one character".
    assert!(
        screen.contains("| --disable-dynamic-vram "),
        "the table was wrapped to nothing:\n{screen}"
    );
}

/// Starts the README's bisect on `scenario` in a terminal, waits until the first run's log
/// shows `phase_line`, presses Ctrl-C, and checks: the tool says within a second and a half
/// that it is interrupting, exits 130, and leaves no process behind.
fn ctrl_c_during(scenario: serde_json::Value, phase_line: &str) {
    let install = FakeComfy::new("0.38.1", scenario);
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = readme_bisect(&install, &tmp.path().join("s"));
    cmd.args(["--stall-timeout", "5m"]);
    let mut pty = Pty::spawn(cmd, 100, 30);
    support::wait_for_text(&tmp.path().join("s/runs/001/comfyui.log"), phase_line);
    pty.type_keys(b"\x03");
    pty.wait_for("interrupting", Duration::from_millis(1500));
    let code = pty.exit_code(Duration::from_secs(20));
    assert_eq!(code, 130, "{}", pty.text());
    install.assert_nothing_left();
}

#[test]
fn ctrl_c_while_comfyui_starts() {
    ctrl_c_during(
        serde_json::json!({"timing": {"startup_delay": 30}}),
        "Total VRAM",
    );
}

#[test]
fn ctrl_c_while_a_prompt_samples() {
    ctrl_c_during(
        serde_json::json!({"timing": {"node_time": 3}}),
        "got prompt",
    );
}

#[test]
fn ctrl_c_while_a_prompt_hangs() {
    ctrl_c_during(
        serde_json::json!({"rules": [{"name": "hang", "effect": "hang", "node": "KSampler"}]}),
        "Requested to load",
    );
}

#[test]
fn ctrl_c_twice_while_comfyui_is_torn_down_kills_it_at_once() {
    // ComfyUI takes 30 s to end after SIGTERM; the first run (it fails: the README case)
    // reaches its teardown, then two presses of Ctrl-C.
    let mut scenario = support::comfy::readme_scenario()
        .as_object()
        .unwrap()
        .clone();
    scenario.insert("timing".into(), serde_json::json!({"shutdown_delay": 30}));
    let install = FakeComfy::new("0.38.1", serde_json::Value::Object(scenario));
    let tmp = tempfile::tempdir().unwrap();
    let mut pty = Pty::spawn(readme_bisect(&install, &tmp.path().join("s")), 100, 30);
    // The status line says when the teardown starts; SIGTERM follows within milliseconds.
    pty.wait_for("stopping ComfyUI", Duration::from_secs(30));
    let pressed = std::time::Instant::now();
    pty.type_keys(b"\x03");
    // The first press is taken (and said) before the second is typed: two presses are never
    // one signal.
    pty.wait_for("press Ctrl-C again", Duration::from_secs(10));
    pty.type_keys(b"\x03");
    let code = pty.exit_code(Duration::from_secs(20));
    assert_eq!(code, 130, "{}", pty.text());
    assert!(
        pressed.elapsed() < Duration::from_secs(8),
        "a second Ctrl-C must not wait out the grace period: {:?}",
        pressed.elapsed()
    );
    install.assert_nothing_left();
}

#[test]
fn without_a_terminal_a_long_run_says_it_goes_on() {
    let install = FakeComfy::new(
        "0.38.1",
        serde_json::json!({"rules": [{"name": "hang", "effect": "hang", "node": "KSampler"}]}),
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = readme_bisect(&install, &tmp.path().join("s"))
        .args(["--stall-timeout", "12s", "--max-runs", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("run 1: still running after"),
        "no heartbeat during a 12 s silence:\n{stderr}"
    );
    assert!(stderr.contains("hang"), "{stderr}");
    install.assert_nothing_left();
}
