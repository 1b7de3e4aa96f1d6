//! `vrambisect regress` against the stand-in in a git repository with a made-up history:
//! a regression at one commit, commits that cannot be tested (one that does not start, one
//! whose requirements pin other versions, old ones that lack a flag), a merged branch, both
//! ends misbehaving, a resume. After each, the user's checkout is as it was: HEAD, branch,
//! status, stash and bisect state.

use crate::support;
use crate::support::bundle;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::{fixture, json, root};

const SD15: &str = "workflows/sd15_txt2img.json";

/// A git repository made from the stand-in.
pub(crate) struct Repo {
    _tmp: tempfile::TempDir,
    pub(crate) dir: PathBuf,
}

pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
        .args(args)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if name == "tests" || name == "__pycache__" {
            continue;
        }
        let target = to.join(&name);
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

impl Repo {
    /// Commit 0 is the stand-in passing; then one commit per step, each changing the files
    /// `step(i)` returns (path, content) and committed as `commit i` (with CHANGES.txt).
    pub(crate) fn new(n: usize, step: impl Fn(usize) -> Vec<(&'static str, String)>) -> Repo {
        Repo::new_from(n, &[], &[], step)
    }

    /// As [`Repo::new`], with `first` (path, content) in commit 0, and the commits `only`
    /// changing nothing but what their step gives.
    pub(crate) fn new_from(
        n: usize,
        first: &[(&str, String)],
        only: &[usize],
        step: impl Fn(usize) -> Vec<(&'static str, String)>,
    ) -> Repo {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ComfyUI");
        copy_dir(&root().join("fixtures/fake-comfyui"), &dir);
        std::fs::write(dir.join("scenario.json"), "{\"rules\": []}\n").unwrap();
        for (path, content) in first {
            std::fs::write(dir.join(path), content).unwrap();
        }
        git(&dir, &["init", "-q", "-b", "master"]);
        git(&dir, &["add", "-A"]);
        git(&dir, &["commit", "-q", "-m", "commit 0"]);
        git(&dir, &["tag", "good"]);
        for i in 1..=n {
            let mut changes = step(i);
            if !only.contains(&i) {
                changes.push(("CHANGES.txt", format!("{i}\n")));
            }
            for (path, content) in changes {
                std::fs::write(dir.join(path), content).unwrap();
            }
            git(&dir, &["add", "-A"]);
            git(&dir, &["commit", "-q", "-m", &format!("commit {i}")]);
        }
        Repo { _tmp: tmp, dir }
    }

    /// What must not change: HEAD, the branch, the status, the stash, the bisect state.
    pub(crate) fn state(&self) -> (String, String, String, String, bool) {
        (
            git(&self.dir, &["rev-parse", "HEAD"]),
            git(&self.dir, &["rev-parse", "--abbrev-ref", "HEAD"]),
            git(&self.dir, &["status", "--porcelain"]),
            git(&self.dir, &["stash", "list"]),
            self.dir.join(".git/BISECT_LOG").exists(),
        )
    }

    fn regress(&self, extra: &[&str]) -> (i32, Value, tempfile::TempDir) {
        self.regress_with(extra, &[])
    }

    pub(crate) fn regress_with(
        &self,
        extra: &[&str],
        env: &[(&str, &Path)],
    ) -> (i32, Value, tempfile::TempDir) {
        self.regress_on(SD15, extra, env)
    }

    fn regress_on(
        &self,
        workflow: &str,
        extra: &[&str],
        env: &[(&str, &Path)],
    ) -> (i32, Value, tempfile::TempDir) {
        let before = self.state();
        let out = tempfile::tempdir().unwrap();
        let session = out.path().join("session");
        let wf = fixture(workflow);
        let mut args = vec![
            "regress",
            "--comfyui",
            self.dir.to_str().unwrap(),
            "--workflow",
            wf.to_str().unwrap(),
            "--output",
            session.to_str().unwrap(),
            "--stall-timeout",
            "5s",
        ];
        args.extend_from_slice(extra);
        args.insert(1, "--json");
        let mut cmd = support::vrambisect();
        cmd.args(&args);
        // pip never reaches the network; environments go in the test's own cache.
        cmd.env("PIP_NO_INDEX", "1")
            .env("VRAMBISECT_CACHE_DIR", out.path().join("cache"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let output = cmd.output().unwrap();
        let doc: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
        let code = output.status.code().unwrap_or(-1);
        assert_eq!(self.state(), before, "the user's checkout changed");
        (code, doc, out)
    }
}

fn oom() -> String {
    "{\"rules\": [{\"effect\": \"oom\"}]}\n".into()
}

fn subject(doc: &Value, which: &str) -> String {
    doc[which]["subject"].as_str().unwrap_or("").to_string()
}

#[test]
fn finds_the_commit_that_broke_the_workflow_in_few_runs() {
    let repo = Repo::new(12, |i| {
        if i == 7 {
            vec![("scenario.json", oom())]
        } else {
            vec![]
        }
    });
    let (code, doc, _out) = repo.regress(&["--good", "good"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "first_bad_found");
    assert_eq!(doc["verdict"]["regress"], "oom");
    assert_eq!(subject(&doc, "first_bad"), "commit 7");
    assert_eq!(subject(&doc, "last_good"), "commit 6");
    assert_eq!(doc["first_bad"]["version"], "0.38.1");
    // ⌈log2 12⌉ + 2 = 6 runs at most.
    let runs = doc["runs_total"].as_u64().unwrap();
    assert!(runs <= 6, "{runs} runs");
    assert_eq!(doc["commits"], 12);
    assert!(doc["skipped"].as_array().unwrap().is_empty());
    assert!(doc["reproduce"].as_str().unwrap().contains("--good "));
    // `report` bundles a regress session, and names the regression.
    let session = PathBuf::from(doc["session_dir"].as_str().unwrap());
    let (out, files) = bundle::report_to(&session, &session.join("bundle.zip"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("from a regress session of"));
    let issue = String::from_utf8_lossy(&files["ISSUE.md"]).into_owned();
    let title = issue.lines().find(|l| l.starts_with("# ")).unwrap();
    assert!(title.starts_with("# Regression between "), "{title}");
    assert!(issue.contains("\"commit 7\""), "{issue}");
    // The checkout the session names is where its custom nodes are read.
    assert!(
        !issue.contains("The custom nodes installed are not known"),
        "{issue}"
    );
    // Its commit now is neither end of the regression: not given as the install's.
    let env: Value = serde_json::from_slice(&files["environment.json"]).unwrap();
    assert!(
        env["comfyui_git"]["missing"]
            .as_str()
            .unwrap()
            .contains("ran several commits"),
        "{env:#}"
    );
}

#[test]
fn commits_that_cannot_be_tested_are_skipped_not_bad() {
    // Commit 3 does not start, commit 4 pins another comfy-kitchen than this Python has (one
    // installed for the test on PYTHONPATH; its other pin is not held against it); the
    // regression is at 5.
    let repo = Repo::new(8, |i| match i {
        3 => vec![("main.py", "import no_such_module_anywhere\n".into())],
        4 => {
            let main =
                std::fs::read_to_string(root().join("fixtures/fake-comfyui/main.py")).unwrap();
            vec![
                ("main.py", main),
                (
                    "requirements.txt",
                    "comfy-kitchen==2.0\nsome-frontend-package==9.9\n".into(),
                ),
            ]
        }
        5 => vec![("requirements.txt", "\n".into()), ("scenario.json", oom())],
        _ => vec![],
    });
    let site = tempfile::tempdir().unwrap();
    let dist = site.path().join("comfy_kitchen-1.0.dist-info");
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(
        dist.join("METADATA"),
        "Metadata-Version: 2.1\nName: comfy-kitchen\nVersion: 1.0\n",
    )
    .unwrap();
    let (code, doc, _) = repo.regress_with(&["--good", "good"], &[("PYTHONPATH", site.path())]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(subject(&doc, "first_bad"), "commit 5");
    let skipped = doc["skipped"].as_array().unwrap();
    let reasons: Vec<&str> = skipped
        .iter()
        .map(|s| s["reason"].as_str().unwrap())
        .collect();
    // Which of them the search needed depends on where it lands; each is skipped for its
    // own reason, and none is called bad.
    for r in &reasons {
        assert!(
            r.contains("does not start")
                || r.contains("did not start")
                || r.contains("pins comfy-kitchen==2.0 (this Python has 1.0)"),
            "{r}"
        );
    }
    // Commit 4 sits right below the boundary: it must have been looked at, and skipped.
    assert!(
        reasons.iter().any(|r| r.contains("comfy-kitchen")),
        "{doc:#}"
    );
}

#[test]
fn a_skipped_commit_next_to_the_boundary_leaves_a_list() {
    // The only commit between the last good and the first bad cannot start.
    let repo = Repo::new(3, |i| match i {
        2 => vec![("main.py", "import no_such_module_anywhere\n".into())],
        3 => {
            let main =
                std::fs::read_to_string(root().join("fixtures/fake-comfyui/main.py")).unwrap();
            vec![("main.py", main), ("scenario.json", oom())]
        }
        _ => vec![],
    });
    let (code, doc, _) = repo.regress(&["--good", "good"]);
    assert_eq!(code, 0, "{doc:#}");
    let could_be: Vec<String> = doc["could_be"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["subject"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(could_be, ["commit 2", "commit 3"], "{doc:#}");
    assert!(
        doc["verdict"]["statement"]
            .as_str()
            .unwrap()
            .contains("one of 2 commits")
    );
}

#[test]
fn old_commits_that_lack_a_flag_are_skipped() {
    // Commits 1–3 are 0.3.64, which has no --disable-pinned-memory; 4 on are the v0.38 line,
    // and 6 broke it.
    let repo = Repo::new(8, |i| {
        let version = if i <= 3 { "0.3.64" } else { "0.38.1" };
        let mut c = vec![(
            "comfyui_version.py",
            format!("__version__ = \"{version}\"\n"),
        )];
        if i == 6 {
            c.push(("scenario.json", oom()));
        }
        c
    });
    let (code, doc, _) = repo.regress(&["--good", "HEAD~4", "--", "--disable-pinned-memory"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(subject(&doc, "first_bad"), "commit 6");
    // An older good end lacks the flag: it cannot be the good end.
    let (code, doc, _) = repo.regress(&["--good", "HEAD~7", "--", "--disable-pinned-memory"]);
    assert_eq!(code, 125, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "untestable");
    assert!(
        doc["verdict"]["statement"]
            .as_str()
            .unwrap()
            .contains("does not take these flags"),
        "{doc:#}"
    );
}

#[test]
fn a_merged_branch_is_one_step_of_first_parent_history() {
    let repo = Repo::new(2, |_| vec![]);
    // A branch with three commits, the second of which breaks the workflow, merged as one.
    git(&repo.dir, &["checkout", "-q", "-b", "feature"]);
    for (i, body) in [("a", None), ("b", Some(oom())), ("c", None)] {
        if let Some(b) = body {
            std::fs::write(repo.dir.join("scenario.json"), b).unwrap();
        }
        std::fs::write(repo.dir.join("FEATURE.txt"), i).unwrap();
        git(&repo.dir, &["add", "-A"]);
        git(&repo.dir, &["commit", "-q", "-m", &format!("feature {i}")]);
    }
    git(&repo.dir, &["checkout", "-q", "master"]);
    git(
        &repo.dir,
        &["merge", "-q", "--no-ff", "feature", "-m", "Merge feature"],
    );
    std::fs::write(repo.dir.join("CHANGES.txt"), "after\n").unwrap();
    git(&repo.dir, &["commit", "-q", "-am", "commit after"]);
    let (code, doc, _) = repo.regress(&["--good", "good"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(subject(&doc, "first_bad"), "Merge feature");
    // commit 1, commit 2, the merge, commit after: the branch's own commits are not steps.
    assert_eq!(doc["commits"], 4);
}

#[test]
fn ends_that_do_not_behave_are_said() {
    let passing = Repo::new(3, |_| vec![]);
    let (code, doc, _) = passing.regress(&["--good", "good"]);
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "bad_passes");
    let failing = Repo::new(3, |i| {
        if i == 1 {
            vec![("scenario.json", oom())]
        } else {
            vec![]
        }
    });
    let (code, doc, _) = failing.regress(&["--good", "HEAD~1"]);
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "good_fails");
    assert!(
        doc["verdict"]["statement"]
            .as_str()
            .unwrap()
            .contains("older --good")
    );
}

#[test]
fn a_stopped_session_resumes_without_repeating_a_run() {
    let repo = Repo::new(10, |i| {
        if i == 4 {
            vec![("scenario.json", oom())]
        } else {
            vec![]
        }
    });
    let (code, doc, out) = repo.regress(&["--good", "good", "--max-runs", "2"]);
    assert_eq!(code, 130, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "incomplete");
    assert_eq!(doc["runs_total"], 2);
    let session = out.path().join("session");
    let line = doc["continue_with"].as_str().unwrap();
    assert!(
        line.contains("--resume") && line.contains("--max-runs"),
        "{line}"
    );
    let before = repo.state();
    let (code, doc, _) = json(&[
        "regress",
        "--resume",
        session.to_str().unwrap(),
        "--max-runs",
        "20",
    ]);
    assert_eq!(repo.state(), before);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(subject(&doc, "first_bad"), "commit 4");
    // The two ends were not run again: every commit was run once.
    let runs = doc["runs_total"].as_u64().unwrap();
    let tested = doc["tested"].as_array().unwrap().len() as u64;
    assert_eq!(runs, tested, "{doc:#}");
}

#[test]
fn the_good_end_can_be_a_manager_snapshot() {
    let repo = Repo::new(4, |i| {
        if i == 3 {
            vec![("scenario.json", oom())]
        } else {
            vec![]
        }
    });
    let good = git(&repo.dir, &["rev-parse", "HEAD~2"]);
    let snap = tempfile::tempdir().unwrap();
    let path = snap.path().join("2026-11-20_10-00-00_snapshot.json");
    std::fs::write(
        &path,
        format!(
            "{{\"comfyui\": \"{good}\", \"git_custom_nodes\": {{}}, \"file_custom_nodes\": []}}"
        ),
    )
    .unwrap();
    let (code, doc, _) = repo.regress(&["--good", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(subject(&doc, "first_bad"), "commit 3");
    assert_eq!(subject(&doc, "last_good"), "commit 2");
}

#[test]
fn bad_input_is_refused_before_any_run() {
    let repo = Repo::new(1, |_| vec![]);
    let wf = fixture(SD15);
    let (code, _, out) = json(&[
        "regress",
        "--comfyui",
        repo.dir.to_str().unwrap(),
        "--workflow",
        wf.to_str().unwrap(),
        "--good",
        "no-such-tag",
    ]);
    assert_eq!(code, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-tag is not a commit"));
    // Not a git checkout.
    let plain = tempfile::tempdir().unwrap();
    std::fs::write(plain.path().join("main.py"), "").unwrap();
    let (code, _, out) = json(&[
        "regress",
        "--comfyui",
        plain.path().to_str().unwrap(),
        "--workflow",
        wf.to_str().unwrap(),
        "--good",
        "HEAD~1",
    ]);
    assert_eq!(code, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a git checkout"));
}

#[cfg(unix)]
#[test]
fn ctrl_c_leaves_the_checkout_as_it_was_and_can_resume() {
    let repo = Repo::new(6, |i| {
        if i == 3 {
            vec![("scenario.json", oom())]
        } else {
            vec![]
        }
    });
    // Slow prompts, so Ctrl-C comes while one runs.
    std::fs::write(
        repo.dir.join("scenario.json"),
        "{\"timing\": {\"node_time\": 0.6}, \"rules\": [{\"effect\": \"oom\"}]}\n",
    )
    .unwrap();
    git(&repo.dir, &["commit", "-q", "-am", "slow"]);
    let before = repo.state();
    let out = tempfile::tempdir().unwrap();
    let session = out.path().join("session");
    let wf = fixture(SD15);
    let child = support::vrambisect()
        .args(["regress", "--json", "--comfyui"])
        .arg(&repo.dir)
        .arg("--workflow")
        .arg(&wf)
        .args(["--good", "good", "--output"])
        .arg(&session)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the first run to be under way, then Ctrl-C.
    let started = std::time::Instant::now();
    while !session.join("runs/001/comfyui.log").exists() {
        assert!(started.elapsed().as_secs() < 60, "no run started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A second process on the session is refused, naming the one that runs it.
    let (code, doc, _) = json(&["regress", "--resume", session.to_str().unwrap()]);
    assert_eq!(code, 2, "{doc:#}");
    assert_eq!(
        doc["error"]["message"],
        format!(
            "the session {} is in use by process {}",
            session.display(),
            child.id()
        )
    );
    // Ctrl-C during that first run.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(repo.state(), before, "the user's checkout changed");
    assert_eq!(output.status.code(), Some(130));
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(doc["verdict"]["kind"], "incomplete");
    assert!(
        !session.join("trees").exists(),
        "exported trees are removed"
    );
    let (code, doc, _) = json(&["regress", "--resume", session.to_str().unwrap()]);
    assert_eq!(repo.state(), before);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(subject(&doc, "first_bad"), "commit 3");
}

/// A crash in the middle of writing the journal (here: its last line cut in half, as a power
/// cut leaves it): the resumed session names the torn line, tests that commit again, keeps
/// every entry before it, and writes its own entries on lines of their own.
#[test]
fn a_journal_torn_mid_write_resumes_with_nothing_lost() {
    let repo = Repo::new(10, |i| {
        if i == 6 {
            vec![("scenario.json", oom())]
        } else {
            vec![]
        }
    });
    let (code, doc, out) = repo.regress(&["--good", "good", "--max-runs", "3"]);
    assert_eq!(code, 130, "{doc:#}");
    let session = out.path().join("session");
    let journal = session.join("regress.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let torn: Value = serde_json::from_str(lines[2]).unwrap();
    let kept = format!("{}\n{}\n", lines[0], lines[1]);
    std::fs::write(
        &journal,
        format!("{kept}{}", &lines[2][..lines[2].len() / 2]),
    )
    .unwrap();

    let before = repo.state();
    let out = support::vrambisect()
        .args([
            "regress",
            "--resume",
            session.to_str().unwrap(),
            "--max-runs",
            "20",
        ])
        .output()
        .unwrap();
    assert_eq!(repo.state(), before);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("line 3 of") && stderr.contains("cannot be read (cut short by a crash?)"),
        "{stderr}"
    );
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(session.join("result.json")).unwrap())
            .unwrap();
    assert_eq!(subject(&result, "first_bad"), "commit 6");
    // Nothing lost: the entries before the torn line are still there, the torn commit was
    // tested again, and every entry written since reads back.
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(text.starts_with(&kept), "{text}");
    let read: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(
        read.len(),
        text.lines().count() - 1,
        "only the torn line is unreadable: {text}"
    );
    assert!(
        read[2..].iter().any(|t| t["commit"] == torn["commit"]),
        "the torn commit was tested again: {text}"
    );
    let tested =
        result["tested"].as_array().unwrap().len() + result["skipped"].as_array().unwrap().len();
    assert_eq!(tested, read.len(), "{result:#}");
}

/// The runs of a regress result, in order: (commit subject, kind, mark).
fn tested_kinds(doc: &Value, repo: &Repo) -> Vec<(String, String, String)> {
    let subject_of = |commit: &str| git(&repo.dir, &["log", "-1", "--format=%s", commit]);
    doc["tested"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                subject_of(t["commit"].as_str().unwrap()),
                t["kind"].as_str().unwrap().to_string(),
                t["mark"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn shortened_runs_search_history_and_the_boundary_is_confirmed_in_full() {
    let repo = Repo::new(12, |i| {
        if i == 7 {
            vec![("scenario.json", oom())]
        } else {
            vec![]
        }
    });
    let (code, doc, _out) = repo.regress_on(
        "workflows/sd15_txt2img_20_steps.json",
        &["--good", "good"],
        &[],
    );
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(subject(&doc, "first_bad"), "commit 7");
    assert_eq!(subject(&doc, "last_good"), "commit 6");
    assert_eq!(doc["quick"]["state"], "used");
    let tested = tested_kinds(&doc, &repo);
    // The ends in full, the bad end shortened (the check), then shortened commits, then the
    // boundary in full.
    assert_eq!(tested[0], ("commit 12".into(), "full".into(), "bad".into()));
    assert_eq!(tested[1], ("commit 0".into(), "full".into(), "good".into()));
    assert_eq!(
        tested[2],
        ("commit 12".into(), "quick".into(), "bad".into())
    );
    let n = tested.len();
    assert_eq!(
        tested[n - 2],
        ("commit 7".into(), "full".into(), "bad".into())
    );
    assert_eq!(
        tested[n - 1],
        ("commit 6".into(), "full".into(), "good".into())
    );
    assert!(
        tested[3..n - 2].iter().all(|t| t.1 == "quick"),
        "{tested:?}"
    );
    let statement = doc["verdict"]["statement"].as_str().unwrap();
    assert!(
        statement.contains("Searched on 2-step runs, which fail as your workflow does"),
        "{statement}"
    );
}

#[test]
fn a_regression_past_step_10_is_searched_in_full() {
    let late = "{\"rules\": [{\"effect\": \"oom\", \"node\": \"KSampler\", \"at_step\": 12}]}\n";
    let repo = Repo::new(8, |i| {
        if i == 3 {
            vec![("scenario.json", late.to_string())]
        } else {
            vec![]
        }
    });
    let (code, doc, _out) = repo.regress_on(
        "workflows/sd15_txt2img_20_steps.json",
        &["--good", "good"],
        &[],
    );
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(subject(&doc, "first_bad"), "commit 3");
    assert_eq!(doc["quick"]["state"], "set_aside");
    let tested = tested_kinds(&doc, &repo);
    assert_eq!(
        tested.iter().filter(|t| t.1 == "quick").count(),
        1,
        "{tested:?}"
    );
    // With --quick off: one run fewer.
    let (_, off, _out2) = repo.regress_on(
        "workflows/sd15_txt2img_20_steps.json",
        &["--good", "good", "--quick", "off"],
        &[],
    );
    assert_eq!(subject(&off, "first_bad"), "commit 3");
    assert_eq!(
        doc["runs_total"].as_u64().unwrap(),
        off["runs_total"].as_u64().unwrap() + 1
    );
}

/// Starts `regress --json` with `args`, waits for `file` to appear under the session folder,
/// then presses Ctrl-C: the session stops (130) with what it had.
fn interrupted_at(args: &[&str], session: &Path, file: &str) -> Value {
    let child = support::vrambisect()
        .args(["regress", "--json"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !session.join(file).exists() {
        assert!(started.elapsed().as_secs() < 120, "{file} did not appear");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let output = child.wait_with_output().unwrap();
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(130), "{doc:#}");
    doc
}

#[test]
fn then_bisect_finds_the_flags_on_the_first_bad_commit_and_resumes_in_each_phase() {
    // Commit 7 brings Dynamic VRAM's OOM, which --disable-dynamic-vram avoids; prompts are
    // slow enough for Ctrl-C to come while one runs.
    let repo = Repo::new(10, |i| {
        if i == 7 {
            vec![(
                "scenario.json",
                std::fs::read_to_string(root().join("fixtures/fake-comfyui/scenario.json"))
                    .unwrap()
                    .replacen("{", "{\"timing\": {\"node_time\": 0.3},", 1),
            )]
        } else {
            vec![]
        }
    });
    let before = repo.state();
    let out = tempfile::tempdir().unwrap();
    let session = out.path().join("session");
    let wf = fixture(SD15);
    let s = session.to_str().unwrap();
    let new = [
        "--comfyui",
        repo.dir.to_str().unwrap(),
        "--workflow",
        wf.to_str().unwrap(),
        "--good",
        "good",
        "--output",
        s,
        "--then-bisect",
    ];
    // Stopped in the regress phase: the bad end's run.
    let doc = interrupted_at(&new, &session, "runs/001/comfyui.log");
    assert_eq!(doc["verdict"]["kind"], "incomplete");
    assert!(doc["then_bisect"].is_null());
    // Resumed, then stopped in the bisect phase: the commit is known, the flags are not yet.
    let doc = interrupted_at(&["--resume", s], &session, "bisect/runs/001/comfyui.log");
    assert_eq!(doc["verdict"]["kind"], "first_bad_found", "{doc:#}");
    assert_eq!(subject(&doc, "first_bad"), "commit 7");
    assert_eq!(
        doc["then_bisect"]["verdict"]["kind"], "incomplete",
        "{doc:#}"
    );
    assert!(
        doc["continue_with"]
            .as_str()
            .unwrap()
            .contains(&format!("regress --resume {s}")),
        "{doc:#}"
    );
    assert!(!session.join("first-bad").exists(), "the export is removed");
    // Resumed to the end: nothing run twice.
    let (code, doc, _) = json(&["regress", "--resume", s]);
    assert_eq!(repo.state(), before, "the user's checkout changed");
    assert_eq!(code, 0, "{doc:#}");
    let b = &doc["then_bisect"];
    assert_eq!(b["verdict"]["kind"], "fixed_by", "{b:#}");
    assert_eq!(
        b["verdict"]["fixing_flags"],
        serde_json::json!(["--disable-dynamic-vram"])
    );
    let first_bad = doc["first_bad"]["commit"].as_str().unwrap()[..7].to_string();
    let statement = doc["verdict"]["statement"].as_str().unwrap();
    assert!(
        statement.contains(&format!(
            "On {first_bad}, `--disable-dynamic-vram` fixes it (flag bisect, "
        )),
        "{statement}"
    );
    // Each bisect run journaled once, numbered without a gap (the one Ctrl-C cut short redone
    // under its own number).
    support::assert_runs_numbered_once(&session.join("bisect/journal.jsonl"));
    // One bundle: the regress and the bisect of its flags.
    let (_, files) = bundle::report_to(&session, &session.join("bundle.zip"));
    let issue = String::from_utf8_lossy(&files["ISSUE.md"]).into_owned();
    assert!(
        issue.contains("`--disable-dynamic-vram` fixes it"),
        "{issue}"
    );
    assert!(
        files.keys().any(|k| k.starts_with("runs/bisect-001/")),
        "{:?}",
        files.keys().collect::<Vec<_>>()
    );
}

#[test]
fn then_bisect_starts_from_the_first_bad_commits_failure_on_record() {
    // Commit 4 brings Dynamic VRAM's OOM at the first sampling step of a 20-step workflow.
    let repo = Repo::new(6, |i| {
        if i == 4 {
            vec![(
                "scenario.json",
                r#"{"rules": [{"when": {"state": {"dynamic_vram": true}}, "effect": "oom", "node": "KSampler", "at_step": 1}]}"#.to_string(),
            )]
        } else {
            vec![]
        }
    });
    let out = tempfile::tempdir().unwrap();
    let session = out.path().join("session");
    let wf = fixture("workflows/sd15_txt2img_20_steps.json");
    let (code, doc, _) = json(&[
        "regress",
        "--comfyui",
        repo.dir.to_str().unwrap(),
        "--workflow",
        wf.to_str().unwrap(),
        "--good",
        "good",
        "--output",
        session.to_str().unwrap(),
        "--then-bisect",
    ]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(subject(&doc, "first_bad"), "commit 4");
    let b = &doc["then_bisect"];
    assert_eq!(
        b["verdict"]["fixing_flags"],
        serde_json::json!(["--disable-dynamic-vram"]),
        "{b:#}"
    );
    // The regress's failing full run of that commit is the failure on record: the bisect's
    // first run is shortened, and its only full run is the confirmation.
    let on_record = &b["verdict"]["failure_on_record"];
    assert_eq!(on_record["outcome"], "oom", "{b:#}");
    assert!(
        on_record["file"]
            .as_str()
            .unwrap()
            .starts_with(session.join("runs").to_str().unwrap()),
        "{on_record}"
    );
    let mut runs: Vec<(u64, String)> = b["configs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["each_run"].as_array().unwrap().clone())
        .map(|r| {
            (
                r["n"].as_u64().unwrap(),
                r["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    runs.sort();
    assert_eq!(runs[0], (1, "quick".to_string()), "{runs:?}");
    assert_eq!(runs.iter().filter(|r| r.1 == "full").count(), 1, "{runs:?}");
}
