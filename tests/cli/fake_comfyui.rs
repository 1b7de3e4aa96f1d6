//! The fake ComfyUI held to the real recordings: its own unittest suite (argparse messages,
//! startup lines, HTTP bodies, websocket sequences, scripted failures, GPU state).

#[test]
fn fake_comfyui_matches_the_recordings() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("python3")
        .args([
            "-m",
            "unittest",
            "discover",
            "-s",
            "fixtures/fake-comfyui/tests",
        ])
        .current_dir(root)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the fake ComfyUI's suite failed:\n{stderr}"
    );
    assert!(stderr.contains("OK"), "{stderr}");
}
