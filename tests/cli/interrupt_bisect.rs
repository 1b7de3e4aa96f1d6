//! Interrupting a bisect at many points — while ComfyUI starts, mid-prompt, during teardown —
//! with SIGINT, SIGTERM and SIGKILL of the tool: no ComfyUI is left behind, and `--resume`
//! finishes with exactly the runs an uninterrupted bisect makes (none repeated, none lost).

use crate::support;

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::comfy::FakeComfy;
use support::fixture;

fn scenario() -> Value {
    // Slow enough to be caught at each point: a start-up of ~0.3 s, ~0.2 s per node.
    json!({
        "timing": {"startup_delay": 0.3, "node_time": 0.2},
        "rules": [{"when": {"state": {"dynamic_vram": true}}, "effect": "oom"}]
    })
}

/// The configurations run, in order, as the journal has them.
fn journal_keys(session: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(session.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| e["config"]["key"].as_str().unwrap().to_string())
        .collect()
}

fn bisect_args<'a>(install: &'a FakeComfy, wf: &'a str, session: &'a str) -> Vec<&'a str> {
    vec![
        "bisect",
        "--json",
        "--comfyui",
        install.path_str(),
        "--workflow",
        wf,
        "--output",
        session,
    ]
}

#[test]
fn interrupted_anywhere_then_resumed_gives_exactly_the_uninterrupted_runs() {
    let wf = fixture("workflows/sd15_txt2img.json");
    let wf = wf.to_str().unwrap();

    // The reference: the same bisect, never interrupted.
    let install = FakeComfy::new("0.38.1", scenario());
    let tmp = tempfile::tempdir().unwrap();
    let reference = tmp.path().join("reference");
    let out = support::vrambisect()
        .args(bisect_args(&install, wf, reference.to_str().unwrap()))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = journal_keys(&reference);
    assert!(expected.len() >= 3);

    // Where to strike: while ComfyUI starts (0.15 s in), mid-prompt of the first run
    // (0.9 s), around the first teardown and the second start (1.6 s), later (2.6 s).
    let points = [150u64, 900, 1600, 2600];
    let signals = [libc::SIGINT, libc::SIGTERM, libc::SIGKILL];
    for (i, (delay, signal)) in points
        .iter()
        .flat_map(|d| signals.iter().map(move |s| (*d, *s)))
        .enumerate()
    {
        // Only a third of the grid, rotating, keeps the test fast; every point and every
        // signal is still covered.
        if i % 3 != 0 && i % 4 != 1 {
            continue;
        }
        let install = FakeComfy::new("0.38.1", scenario());
        let session = tmp.path().join(format!("s-{delay}-{signal}"));
        let child = support::vrambisect()
            .args(bisect_args(&install, wf, session.to_str().unwrap()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        unsafe {
            libc::kill(child.id() as i32, signal);
        }
        let mut child = child;
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "vrambisect did not stop after signal {signal} at {delay} ms"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        install.assert_nothing_left();
        let before = journal_keys(&session);
        assert!(
            expected.starts_with(&before),
            "signal {signal} at {delay} ms: journal {before:?} is not a prefix of {expected:?}"
        );

        if !session.join("session.json").exists() {
            continue; // stopped before the session folder existed: nothing to resume
        }
        resume_gives(
            &install,
            &session,
            &expected,
            &format!("signal {signal} at {delay} ms"),
        );
    }
}

/// `--resume` finishes the session with the verdict and exactly the `expected` runs, and
/// leaves no ComfyUI behind.
fn resume_gives(install: &FakeComfy, session: &std::path::Path, expected: &[String], when: &str) {
    let (code, doc, out) = support::json(&["bisect", "--resume", session.to_str().unwrap()]);
    install.assert_nothing_left();
    assert_eq!(code, 0, "{when}: {}", String::from_utf8_lossy(&out.stderr));
    resume_warned_of_torn_lines(session, &out, when);
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"])
    );
    assert_eq!(journal_keys(session), expected, "{when}");
    assert_eq!(doc["runs_total"].as_u64().unwrap() as usize, expected.len());
}

/// A resume says which journal lines it could not read (none, unless one was torn).
fn resume_warned_of_torn_lines(session: &std::path::Path, out: &std::process::Output, when: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let torn = std::fs::read_to_string(session.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .any(|l| serde_json::from_str::<Value>(l).is_err());
    assert_eq!(
        stderr.contains("cannot be read (cut short by a crash?): the run after run"),
        torn,
        "{when}: {stderr}"
    );
}

/// A journal whose last line was torn mid-write (what a crash or a power loss leaves; a
/// signal cannot cut a one-line append short): `--resume` runs that configuration again,
/// and the session ends with exactly the uninterrupted bisect's runs.
#[test]
fn a_journal_torn_mid_write_is_resumed_without_losing_a_run() {
    let wf = fixture("workflows/sd15_txt2img.json");
    let wf = wf.to_str().unwrap();
    let install = FakeComfy::new("0.38.1", scenario());
    let tmp = tempfile::tempdir().unwrap();
    let session = tmp.path().join("session");
    let session_str = session.to_str().unwrap();
    let out = support::vrambisect()
        .args(bisect_args(&install, wf, session_str))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let expected = journal_keys(&session);
    assert!(expected.len() >= 3);

    for torn in [expected.len() - 1, 1] {
        // Keep `torn` whole entries, then half of the next one.
        let path = session.join("journal.jsonl");
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let whole: String = lines[..torn].iter().map(|l| format!("{l}\n")).collect();
        let half = &lines[torn][..lines[torn].len() / 2];
        std::fs::write(&path, format!("{whole}{half}")).unwrap();
        assert_eq!(journal_keys(&session), expected[..torn]);
        // A crash mid-write leaves no result behind it.
        std::fs::remove_file(session.join("result.json")).unwrap();

        // The torn entry's run is made again and recorded on a line of its own.
        resume_gives(
            &install,
            &session,
            &expected,
            &format!("torn after {torn} entries"),
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(&format!("{half}\n")),
            "the torn line is kept apart"
        );
        // One folder per run: the torn run's folder was replaced, not added to.
        let folders = std::fs::read_dir(session.join("runs")).unwrap().count();
        assert_eq!(folders, expected.len());
    }
}

/// ComfyUI killed from outside in the middle of one prompt (the OOM killer, a user closing
/// its window) in a configuration that would pass: that run is a crash, neither a pass nor the
/// failure hunted, so the configuration runs again and the verdict is the uninterrupted one.
#[test]
fn comfyui_killed_mid_prompt_once_does_not_change_the_verdict() {
    let wf = fixture("workflows/sd15_txt2img.json");
    let wf = wf.to_str().unwrap();
    let install = FakeComfy::new("0.38.1", scenario());
    let tmp = tempfile::tempdir().unwrap();
    let session = tmp.path().join("session");

    // Kills the first ComfyUI started with --disable-dynamic-vram once it is well into its
    // prompt: its run's log (the newest run folder) says `got prompt`, then 0.3 s more (0.2 s
    // per node).
    let dir = install.path().to_path_buf();
    let runs = session.join("runs");
    let prompt_running = move || {
        let newest = std::fs::read_dir(&runs)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .max();
        newest.is_some_and(|d| {
            std::fs::read_to_string(d.join("comfyui.log")).is_ok_and(|l| l.contains("got prompt"))
        })
    };
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut seen: Option<(i32, Instant)> = None;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                for pid in support::comfy::processes_in(&dir) {
                    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    let cmdline = String::from_utf8_lossy(&cmdline);
                    if cmdline.contains("main.py") && cmdline.contains("--disable-dynamic-vram") {
                        match seen {
                            None if prompt_running() => seen = Some((pid, Instant::now())),
                            Some((p, since))
                                if p == pid && since.elapsed() > Duration::from_millis(300) =>
                            {
                                unsafe { libc::kill(pid, libc::SIGKILL) };
                                return true;
                            }
                            _ => {}
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        })
    };
    let (code, doc, out) = support::json(&bisect_args(&install, wf, session.to_str().unwrap()));
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(killer.join().unwrap(), "no run was killed");
    install.assert_nothing_left();
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"]),
        "{doc:#}"
    );
    let crashes = std::fs::read_to_string(session.join("journal.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["trial"]["outcome"] == "crash")
        .count();
    assert_eq!(
        crashes,
        1,
        "the killed run is kept as a crash: {}",
        std::fs::read_to_string(session.join("journal.jsonl")).unwrap()
    );
}

/// A session is written by one process at a time: `--resume` of a bisect that still runs is
/// refused with the pid of the one that runs it, and the running bisect goes on undisturbed
/// (runs numbered 1, 2, 3, ... once each).
#[test]
fn a_second_process_on_a_running_session_is_refused() {
    let wf = fixture("workflows/sd15_txt2img.json");
    let wf = wf.to_str().unwrap();
    let install = FakeComfy::new("0.38.1", scenario());
    let tmp = tempfile::tempdir().unwrap();
    let session = tmp.path().join("session");
    let session_str = session.to_str().unwrap();
    let child = support::vrambisect()
        .args(bisect_args(&install, wf, session_str))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    support::wait_for_text(&session.join("runs/001/comfyui.log"), "Starting server");
    let (code, doc, _) = support::json(&["bisect", "--resume", session_str]);
    assert_eq!(code, 2, "{doc:#}");
    assert_eq!(
        doc["error"]["message"],
        format!(
            "the session {session_str} is in use by process {}",
            child.id()
        )
    );
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    support::assert_runs_numbered_once(&session.join("journal.jsonl"));
    // Once it has ended the session is free again: a resume shows its verdict.
    let (code, doc, _) = support::json(&["bisect", "--resume", session_str]);
    assert_eq!(code, 0, "{doc:#}");
    assert!(!session.join("session.owner").exists());
    install.assert_nothing_left();
}

/// The session folder removed while the bisect runs: the bisect stops with one line saying
/// so (exit 3), not a hint to free disk space or to resume what is gone, and leaves no
/// ComfyUI behind.
#[test]
fn a_session_folder_removed_mid_run_is_said_plainly() {
    let wf = fixture("workflows/sd15_txt2img.json");
    let install = FakeComfy::new("0.38.1", scenario());
    let tmp = tempfile::tempdir().unwrap();
    let session = tmp.path().join("session");
    let session_str = session.to_str().unwrap();
    let child = support::vrambisect()
        .args(bisect_args(&install, wf.to_str().unwrap(), session_str))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    support::wait_for_text(&session.join("runs/002/comfyui.log"), "Starting server");
    // Moved aside in one step, then removed: the bisect is still writing into it, so a
    // removal in place can race a file it creates (a directory that is not empty).
    let aside = tmp.path().join("removed");
    std::fs::rename(&session, &aside).unwrap();
    let _ = std::fs::remove_dir_all(&aside);
    let output = child.wait_with_output().unwrap();
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(3), "{doc:#}");
    assert_eq!(
        doc["error"]["message"],
        format!("the session folder {session_str} was removed or moved while the bisect ran")
    );
    install.assert_nothing_left();
}
