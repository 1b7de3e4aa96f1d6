use super::*;

/// Makes the files named (folders as needed), each empty unless given text.
fn files(root: &Path, names: &[&str]) {
    for name in names {
        let (name, text) = name.split_once('=').unwrap_or((name, ""));
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

fn origin(cwd: &Path, interpreter: Option<PathBuf>) -> Origin {
    Origin {
        interpreter: interpreter.map(Interpreter::started_by),
        cwd: cwd.to_path_buf(),
        desktop: DesktopPlaces::default(),
    }
}

/// ComfyUI with its venv inside it.
const VENV_INSIDE: [&str; 3] = [
    "ComfyUI/main.py",
    "ComfyUI/venv/pyvenv.cfg",
    "ComfyUI/venv/bin/python",
];

fn same(a: &Path, b: &Path) -> bool {
    crate::paths::canonical(a) == crate::paths::canonical(b)
}

#[test]
fn the_portable_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().join("ComfyUI_windows_portable");
    files(&top, &["python_embeded/python.exe", "ComfyUI/main.py"]);
    let py = top.join("python_embeded/python.exe");
    // Started from anywhere (here: an empty folder).
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let o = origin(&elsewhere, Some(py.clone()));
    let dir = comfyui_dir(None, None, &o).unwrap().unwrap();
    assert!(same(&dir.path, &top.join("ComfyUI")));
    assert_eq!(
        dir.source,
        "the ComfyUI folder beside python_embeded of the Python that ran python -m vrambisect"
    );
    let python = python_for(&dir.path, None, &o);
    assert_eq!(python.path, py);
    assert_eq!(python.source, "the Python that ran python -m vrambisect");
    // From the portable folder itself, or from ComfyUI inside it: the same folder, no doubt.
    for cwd in [top.clone(), top.join("ComfyUI")] {
        let o = origin(&cwd, Some(py.clone()));
        let dir = comfyui_dir(None, None, &o).unwrap().unwrap();
        assert!(same(&dir.path, &top.join("ComfyUI")), "{dir:?}");
    }
}

#[test]
fn a_venv_inside_or_beside_the_comfyui_folder() {
    let tmp = tempfile::tempdir().unwrap();
    // (folder, its files, the interpreter in it, where the finding says it came from)
    let cases = [
        (
            "a",
            VENV_INSIDE,
            "ComfyUI/venv/bin/python",
            "the folder holding venv, the venv of the Python that ran python -m vrambisect",
        ),
        (
            "b",
            [
                "ComfyUI/main.py",
                ".venv/pyvenv.cfg",
                ".venv/Scripts/python.exe",
            ],
            ".venv/Scripts/python.exe",
            "the ComfyUI folder beside .venv, the venv of the Python that ran python -m vrambisect",
        ),
    ];
    for (folder, names, python, source) in cases {
        let root = tmp.path().join(folder);
        files(&root, &names);
        let py = root.join(python);
        let o = origin(tmp.path(), Some(py.clone()));
        let dir = comfyui_dir(None, None, &o).unwrap().unwrap();
        assert!(same(&dir.path, &root.join("ComfyUI")), "{folder}: {dir:?}");
        assert_eq!(dir.source, source);
        // The interpreter belongs to the install, its venv inside it or not.
        assert_eq!(python_for(&dir.path, None, &o).path, py);
    }
    let beside = tmp.path().join("b");
    let py = beside.join(".venv/Scripts/python.exe");
    // --python is looked around in the same way, instead of the interpreter.
    let o = origin(tmp.path(), None);
    let dir = comfyui_dir(None, Some(&py), &o).unwrap().unwrap();
    assert!(same(&dir.path, &beside.join("ComfyUI")));
    assert!(dir.source.ends_with("of --python"), "{}", dir.source);
    // A folder called bin or Scripts without pyvenv.cfg is not a venv.
    let plain = tmp.path().join("c");
    files(&plain, &["ComfyUI/main.py", "env/bin/python"]);
    let o = origin(tmp.path(), Some(plain.join("env/bin/python")));
    assert_eq!(comfyui_dir(None, None, &o).unwrap(), None);
}

fn desktop(tmp: &Path) -> (PathBuf, PathBuf, DesktopPlaces) {
    let base = tmp.join("Documents/ComfyUI");
    let app = tmp.join("Local/Programs/@comfyorgcomfyui-electron/resources/ComfyUI");
    files(
        &base,
        &[
            ".venv/pyvenv.cfg",
            ".venv/Scripts/python.exe",
            "user/default/comfy.settings.json={}",
        ],
    );
    files(&app, &["main.py"]);
    let config = tmp.join("Roaming/ComfyUI/config.json");
    let text = serde_json::json!({ "basePath": base, "installState": "installed" }).to_string();
    files(tmp, &[&format!("Roaming/ComfyUI/config.json={text}")]);
    let places = DesktopPlaces {
        configs: vec![config],
        apps: vec![
            tmp.join("Local/Programs/comfyui-electron/resources/ComfyUI"),
            app.clone(),
        ],
    };
    (base, app, places)
}

#[test]
fn comfyui_desktop() {
    let tmp = tempfile::tempdir().unwrap();
    let (base, app, places) = desktop(tmp.path());
    let py = base.join(".venv/Scripts/python.exe");
    let o = Origin {
        desktop: places.clone(),
        ..origin(tmp.path(), Some(py.clone()))
    };
    let dir = comfyui_dir(None, None, &o).unwrap().unwrap();
    assert!(same(&dir.path, &app));
    assert!(
        dir.source
            .starts_with("ComfyUI Desktop's own ComfyUI folder (its base folder ")
            && dir.source.contains("holds .venv, the venv)"),
        "{}",
        dir.source
    );
    assert_eq!(python_for(&dir.path, None, &o).path, py);
    // The plain binary, given Desktop's ComfyUI folder: Desktop's venv is its Python.
    let o = Origin {
        desktop: places.clone(),
        ..origin(tmp.path(), None)
    };
    let python = python_for(&app, None, &o);
    assert_eq!(python.path, py);
    assert!(
        python
            .source
            .starts_with("ComfyUI Desktop's venv in its base folder"),
        "{}",
        python.source
    );
    // Desktop's settings, but its app is not where Desktop puts it: said, not guessed.
    std::fs::remove_file(app.join("main.py")).unwrap();
    let o = Origin {
        desktop: places,
        ..origin(tmp.path(), Some(py))
    };
    let err = comfyui_dir(None, None, &o).unwrap_err();
    let LocateError::DesktopAppMissing { base, looked } = &err else {
        panic!("{err}")
    };
    assert!(same(base, &tmp.path().join("Documents/ComfyUI")), "{err}");
    assert!(looked.starts_with("looked in "), "{err}");
    assert!(
        err.to_string()
            .contains("is ComfyUI Desktop's base folder, but Desktop's own ComfyUI folder was not found (looked in "),
        "{err}"
    );
    assert!(Error::from(err).hint.unwrap().contains("--comfyui"));
    // Linux: Desktop's settings are known, its app is not.
    let o = Origin {
        desktop: DesktopPlaces {
            apps: Vec::new(),
            ..o.desktop
        },
        ..o
    };
    let err = comfyui_dir(None, None, &o).unwrap_err();
    assert!(
        matches!(&err, LocateError::DesktopAppMissing { looked, .. } if looked == "Desktop has no app for this platform"),
        "{err}"
    );
}

#[test]
fn the_current_folder_and_two_candidates() {
    let tmp = tempfile::tempdir().unwrap();
    files(
        tmp.path(),
        &[
            "here/main.py",
            "there/main.py",
            "there/venv/pyvenv.cfg",
            "there/venv/bin/python",
        ],
    );
    let here = tmp.path().join("here");
    let dir = comfyui_dir(None, None, &origin(&here, None))
        .unwrap()
        .unwrap();
    assert_eq!(
        dir,
        Chosen {
            path: here.clone(),
            source: "the current folder".into()
        }
    );
    // The Python of one install, started in the folder of another: both are named.
    let py = tmp.path().join("there/venv/bin/python");
    let o = origin(&here, Some(py.clone()));
    let err = comfyui_dir(None, None, &o).unwrap_err();
    let LocateError::Several(candidates) = &err else {
        panic!("{err}")
    };
    let sources: Vec<&str> = candidates.iter().map(|c| c.source.as_str()).collect();
    assert_eq!(sources.len(), 2, "{err}");
    assert!(sources.contains(&"the current folder"), "{err}");
    assert!(
        sources
            .iter()
            .any(|s| s.starts_with("the folder holding venv")),
        "{err}"
    );
    // As the user reads it.
    let shown = Error::from(err.clone());
    assert!(
        shown
            .message
            .starts_with("more than one ComfyUI folder could be meant: "),
        "{shown}"
    );
    assert!(
        shown.message.contains("here (the current folder)"),
        "{shown}"
    );
    assert_eq!(
        shown.hint.as_deref(),
        Some("pass --comfyui with the one to use")
    );
    assert_eq!(shown.exit_code(), crate::error::exit::USAGE);
    // --comfyui settles it.
    let dir = comfyui_dir(
        Some(Path::new("there")),
        None,
        &origin(tmp.path(), Some(py)),
    )
    .unwrap()
    .unwrap();
    assert!(
        same(&dir.path, &tmp.path().join("there")) && dir.path.is_absolute(),
        "{dir:?}"
    );
    assert_eq!(dir.source, "--comfyui");
    // The parent of a ComfyUI folder (the portable folder, a checkout's parent).
    let dir = comfyui_dir(None, None, &origin(tmp.path(), None)).unwrap();
    assert_eq!(dir, None);
    files(tmp.path(), &["ComfyUI/main.py"]);
    let dir = comfyui_dir(None, None, &origin(tmp.path(), None))
        .unwrap()
        .unwrap();
    assert_eq!(dir.source, "the ComfyUI folder in the current folder");
}

#[test]
fn nothing_found_is_an_error_where_a_folder_is_needed() {
    let tmp = tempfile::tempdir().unwrap();
    let err = require_comfyui_dir(None, None, &origin(tmp.path(), None)).unwrap_err();
    assert_eq!(
        err,
        LocateError::NoneFound {
            looked: "in the current folder".into()
        }
    );
    assert_eq!(
        err.to_string(),
        "no ComfyUI folder given, and none found in the current folder"
    );
    let o = origin(tmp.path(), Some(tmp.path().join("py/bin/python")));
    let err = require_comfyui_dir(None, None, &o).unwrap_err();
    assert_eq!(
        err,
        LocateError::NoneFound {
            looked: "around the Python that ran python -m vrambisect or in the current folder"
                .into()
        }
    );
    assert!(Error::from(err).hint.unwrap().contains("--comfyui"));
}

#[test]
fn which_python_an_install_gets() {
    let tmp = tempfile::tempdir().unwrap();
    files(tmp.path(), &["ComfyUI/main.py", "other/bin/python"]);
    let dir = tmp.path().join("ComfyUI");
    let stranger = tmp.path().join("other/bin/python");
    let on_path = if cfg!(windows) { "python" } else { "python3" };
    // Nothing known: PATH.
    let p = python_for(&dir, None, &origin(tmp.path(), None));
    assert_eq!(
        p,
        Chosen {
            path: on_path.into(),
            source: format!("{on_path} on PATH")
        }
    );
    // Started by a Python that is not the install's, and the install has none: that one.
    let p = python_for(&dir, None, &origin(tmp.path(), Some(stranger.clone())));
    assert_eq!(p.path, stranger);
    assert_eq!(
        p.source,
        "the Python that ran python -m vrambisect; the install has no Python of its own"
    );
    // The install has a venv: it wins over a stranger, and the source says so.
    files(tmp.path(), &["ComfyUI/venv/bin/python"]);
    let p = python_for(&dir, None, &origin(tmp.path(), Some(stranger.clone())));
    assert_eq!(p.path, dir.join("venv/bin/python"));
    assert!(
        p.source
            .starts_with("the install's venv; python -m vrambisect ran from "),
        "{}",
        p.source
    );
    let p = python_for(&dir, None, &origin(tmp.path(), None));
    assert_eq!(p.source, "the install's venv");
    // --python wins; a relative path with a folder is from the current folder, a bare name
    // from PATH.
    let p = python_for(
        &dir,
        Some(Path::new("x/py")),
        &origin(tmp.path(), Some(stranger)),
    );
    assert_eq!(
        p,
        Chosen {
            path: tmp.path().join("x/py"),
            source: "--python".into()
        }
    );
    let p = python_for(
        &dir,
        Some(Path::new("python3.12")),
        &origin(tmp.path(), None),
    );
    assert_eq!(p.path, PathBuf::from("python3.12"));
    // The portable build's python_embeded beside the folder.
    std::fs::remove_dir_all(dir.join("venv")).unwrap();
    files(tmp.path(), &["python_embeded/python.exe"]);
    let p = python_for(&dir, None, &origin(tmp.path(), None));
    assert_eq!(p.source, "the portable build's python_embeded");
}

#[test]
fn desktop_places_of_this_platform() {
    let env = |k: &str| -> Option<OsString> {
        match k {
            "APPDATA" => Some(r"C:\Users\ana\AppData\Roaming".into()),
            "LOCALAPPDATA" => Some(r"C:\Users\ana\AppData\Local".into()),
            "HOME" => Some("/home/ana".into()),
            "XDG_CONFIG_HOME" => Some("".into()),
            _ => None,
        }
    };
    let places = DesktopPlaces::here(env);
    if cfg!(windows) {
        assert_eq!(
            places.configs,
            [PathBuf::from(
                r"C:\Users\ana\AppData\Roaming\ComfyUI\config.json"
            )]
        );
        assert_eq!(places.apps.len(), 3);
        assert!(places.apps[0].ends_with(r"Programs\@comfyorgcomfyui-electron\resources\ComfyUI"));
    } else if cfg!(target_os = "macos") {
        assert_eq!(
            places.apps[0],
            PathBuf::from("/Applications/ComfyUI.app/Contents/Resources/ComfyUI")
        );
    } else {
        // An empty XDG_CONFIG_HOME counts as unset.
        assert_eq!(
            places.configs,
            [PathBuf::from("/home/ana/.config/ComfyUI/config.json")]
        );
        assert!(places.apps.is_empty());
    }
}

#[test]
fn defaults_in_words() {
    let d = Defaults {
        comfyui: Some(Chosen {
            path: "/c".into(),
            source: "the current folder".into(),
        }),
        python: Some(Chosen {
            path: "/c/venv/bin/python".into(),
            source: "the install's venv".into(),
        }),
    };
    assert_eq!(
        d.lines(),
        [
            "ComfyUI: /c (the current folder)",
            "Python:  /c/venv/bin/python (the install's venv)"
        ]
    );
    assert!(Defaults::default().lines().is_empty());
}

#[test]
fn another_tools_venv_beside_an_install_with_its_own() {
    // ComfyUI has its venv; a venv of another tool sits beside it.
    let tmp = tempfile::tempdir().unwrap();
    files(
        tmp.path(),
        &[
            &VENV_INSIDE[..],
            &["kohya-venv/pyvenv.cfg", "kohya-venv/bin/python"],
        ]
        .concat(),
    );
    let stranger = tmp.path().join("kohya-venv/bin/python");
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    // From elsewhere: the stranger's venv does not make ComfyUI its install.
    let o = origin(&elsewhere, Some(stranger.clone()));
    assert_eq!(comfyui_dir(None, None, &o).unwrap(), None);
    // From the ComfyUI folder: that folder, with its own venv.
    let o = origin(&tmp.path().join("ComfyUI"), Some(stranger));
    let dir = comfyui_dir(None, None, &o).unwrap().unwrap();
    assert_eq!(dir.source, "the current folder");
    let p = python_for(&dir.path, None, &o);
    assert_eq!(p.path, tmp.path().join("ComfyUI/venv/bin/python"));
    assert!(
        p.source
            .starts_with("the install's venv; python -m vrambisect ran from "),
        "{}",
        p.source
    );
}

#[test]
fn the_python_the_program_is_installed_in() {
    let tmp = tempfile::tempdir().unwrap();
    files(
        tmp.path(),
        &[
            &VENV_INSIDE[..],
            &[
                "ComfyUI/venv/bin/vrambisect",
                "portable/python_embeded/python.exe",
                "portable/python_embeded/Scripts/vrambisect.exe",
                "portable/ComfyUI/main.py",
                "win/.venv/pyvenv.cfg",
                "win/.venv/Scripts/python.exe",
                "win/.venv/Scripts/vrambisect.exe",
                "cargo/target/release/vrambisect",
            ],
        ]
        .concat(),
    );
    let venv = Interpreter::installed_in(&tmp.path().join("ComfyUI/venv/bin/vrambisect")).unwrap();
    assert_eq!(venv.path, tmp.path().join("ComfyUI/venv/bin/python"));
    assert_eq!(venv.how, "the Python vrambisect is installed in");
    let portable = Interpreter::installed_in(
        &tmp.path()
            .join("portable/python_embeded/Scripts/vrambisect.exe"),
    )
    .unwrap();
    assert_eq!(
        portable.path,
        tmp.path().join("portable/python_embeded/python.exe")
    );
    let win =
        Interpreter::installed_in(&tmp.path().join("win/.venv/Scripts/vrambisect.exe")).unwrap();
    assert_eq!(win.path, tmp.path().join("win/.venv/Scripts/python.exe"));
    // A program built from a checkout belongs to no Python.
    assert_eq!(
        Interpreter::installed_in(&tmp.path().join("cargo/target/release/vrambisect")),
        None
    );
    // An activated venv's plain `vrambisect`, started anywhere: the venv's ComfyUI.
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let o = Origin {
        interpreter: Some(venv.clone()),
        ..origin(&elsewhere, None)
    };
    let dir = comfyui_dir(None, None, &o).unwrap().unwrap();
    assert!(same(&dir.path, &tmp.path().join("ComfyUI")));
    assert_eq!(
        dir.source,
        "the folder holding venv, the venv of the Python vrambisect is installed in"
    );
    let p = python_for(&dir.path, None, &o);
    assert_eq!(
        p,
        Chosen {
            path: venv.path,
            source: "the Python vrambisect is installed in".into()
        }
    );
}
