//! `vrambisect extension facts`: what the ComfyUI extension asks of this program rather than
//! knowing it itself, for one server: the install's kind, the server's flags as a diagnosis
//! tests them and those it leaves out, the line that starts this install with flags, the
//! outcome names with the panel's headline for each, and the session folder's file names.

use crate::launcher::{StartLine, start_line};
use crate::locate::{DesktopPlaces, InstallKind, install_kind};
use crate::outcome::Outcome;
use crate::output::{Answer, Style};
use serde::Serialize;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The answer (`--json`: the extension reads this).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Facts {
    /// The version of the pack this program carries.
    pub version: String,
    pub install: Install,
    pub flags: Flags,
    /// Where the flags given go on this install, and the line.
    pub launch: StartLine,
    /// Every outcome, in the program's order.
    pub outcomes: Vec<OutcomeFacts>,
    /// The files of a bisect's and a regress's session folder.
    pub session_files: serde_json::Value,
}

/// The install a server runs.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Install {
    pub kind: InstallKind,
    pub comfyui: PathBuf,
    pub python: String,
}

/// A server's flags as a diagnosis takes them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Flags {
    /// The flags its runs test, in the order given.
    pub tested: Vec<String>,
    /// How the server is reached and where it keeps its user files
    /// ([`crate::flags::SERVER_ONLY`]): left out of the runs, kept in the launch line.
    pub left_out: Vec<String>,
}

/// One outcome, for the panel.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OutcomeFacts {
    pub name: &'static str,
    /// The panel's headline for a prompt that ended so.
    pub title: &'static str,
    /// Whether launch flags may fix it (the panel offers Diagnose).
    pub flags_may_fix: bool,
}

/// The facts for the server `python` runs from `comfyui` with `argv`.
pub(crate) fn facts(
    comfyui: &Path,
    python: &str,
    argv: &[String],
    desktop: &DesktopPlaces,
) -> Facts {
    let version = crate::install::Install::open(comfyui)
        .ok()
        .and_then(|i| i.version);
    let (tested, left_out) = crate::flags::split_server_flags(argv, version.as_ref());
    let kind = install_kind(python, &comfyui.display().to_string(), argv, desktop);
    Facts {
        version: super::version(),
        install: Install {
            kind,
            comfyui: comfyui.to_path_buf(),
            python: python.to_string(),
        },
        flags: Flags { tested, left_out },
        launch: start_line(kind, python, comfyui, argv),
        outcomes: Outcome::ALL
            .iter()
            .map(|o| OutcomeFacts {
                name: o.as_str(),
                title: o.title(),
                flags_may_fix: o.flags_may_fix(),
            })
            .collect(),
        session_files: crate::session::file_names(),
    }
}

impl Answer for Facts {
    fn render(&self, style: &Style, out: &mut dyn Write) -> io::Result<()> {
        let words = |list: &[String]| {
            if list.is_empty() {
                "(none)".to_string()
            } else {
                crate::text::command_line(list)
            }
        };
        let kind = match self.install.kind {
            InstallKind::Portable => "the Windows portable build",
            InstallKind::Desktop => "ComfyUI Desktop",
            InstallKind::Python => "a Python or venv of its own",
        };
        writeln!(out, "{} {kind}", style.bold("Install:"))?;
        writeln!(out, "  ComfyUI {}", self.install.comfyui.display())?;
        writeln!(out, "  Python  {}", self.install.python)?;
        writeln!(
            out,
            "{} {}",
            style.bold("Flags a diagnosis tests:"),
            words(&self.flags.tested)
        )?;
        writeln!(
            out,
            "{} {}",
            style.bold("Left out of its runs (kept in the line below):"),
            words(&self.flags.left_out)
        )?;
        writeln!(out, "{}", self.launch.place)?;
        writeln!(out, "  {}", self.launch.line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launcher::PORTABLE_LINE;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    fn kind(python: &str, comfyui: &str, args: &[&str]) -> InstallKind {
        install_kind(python, comfyui, &argv(args), &DesktopPlaces::default())
    }

    #[test]
    fn the_install_kind_from_where_its_python_and_folder_are() {
        let portable = r"C:\AI\ComfyUI_windows_portable\python_embeded\python.exe";
        assert_eq!(
            kind(
                portable,
                r"C:\AI\ComfyUI_windows_portable\ComfyUI",
                &["--windows-standalone-build"]
            ),
            InstallKind::Portable
        );
        assert_eq!(
            kind("/home/u/ComfyUI/venv/bin/python", "/home/u/ComfyUI", &[]),
            InstallKind::Python
        );
        let desktop_python = r"C:\Users\u\Documents\ComfyUI\.venv\Scripts\python.exe";
        let app = r"C:\Users\u\AppData\Local\Programs\ComfyUI\resources\ComfyUI";
        assert_eq!(
            kind(
                desktop_python,
                app,
                &["--base-directory", r"C:\Users\u\Documents\ComfyUI"]
            ),
            InstallKind::Desktop
        );
        // Without Desktop's own start, the same folders are a plain Python's.
        assert_eq!(kind(desktop_python, app, &[]), InstallKind::Python);
    }

    #[test]
    fn desktop_is_known_from_its_settings_and_its_app_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("Documents/ComfyUI");
        let venv = base.join(".venv/bin");
        std::fs::create_dir_all(&venv).unwrap();
        std::fs::write(base.join(".venv/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        std::fs::write(venv.join("python"), "").unwrap();
        let app = tmp.path().join("ComfyUI.app/Contents/Resources/ComfyUI");
        std::fs::create_dir_all(&app).unwrap();
        let config = tmp.path().join("config.json");
        std::fs::write(&config, serde_json::json!({"basePath": base}).to_string()).unwrap();
        let places = DesktopPlaces {
            configs: vec![config],
            apps: vec![app.clone()],
        };
        let python = venv.join("python").display().to_string();
        let elsewhere = tmp.path().join("elsewhere").display().to_string();
        // Any Python with Desktop's own ComfyUI folder; Desktop's venv with another folder is
        // not Desktop (its settings would not start that folder).
        assert_eq!(
            install_kind(&python, &elsewhere, &[], &places),
            InstallKind::Python
        );
        assert_eq!(
            install_kind(&python, &app.display().to_string(), &[], &places),
            InstallKind::Desktop
        );
        assert_eq!(
            install_kind("/usr/bin/python3", &app.display().to_string(), &[], &places),
            InstallKind::Desktop
        );
        assert_eq!(
            install_kind("/usr/bin/python3", &elsewhere, &[], &places),
            InstallKind::Python
        );
    }

    #[test]
    fn the_start_line_of_each_kind() {
        let portable = start_line(
            InstallKind::Portable,
            r"C:\AI\ComfyUI_windows_portable\python_embeded\python.exe",
            Path::new("ComfyUI"),
            &argv(&["--windows-standalone-build", "--disable-dynamic-vram"]),
        );
        assert!(portable.place.starts_with("run_nvidia_gpu.bat"));
        assert_eq!(
            portable.line,
            format!("{PORTABLE_LINE} --disable-dynamic-vram")
        );
        assert_eq!(
            portable.line,
            r".\python_embeded\python.exe -s ComfyUI\main.py --windows-standalone-build --disable-dynamic-vram"
        );
        let plain = start_line(
            InstallKind::Python,
            "/home/u/My ComfyUI/venv/bin/python",
            Path::new("/home/u/My ComfyUI"),
            &argv(&["--cpu"]),
        );
        assert_eq!(plain.place, "start ComfyUI with");
        // (The folder joined as this system joins paths.)
        let main_py = Path::new("/home/u/My ComfyUI").join("main.py");
        assert_eq!(
            plain.line,
            format!(
                r#""/home/u/My ComfyUI/venv/bin/python" "{}" --cpu"#,
                main_py.display()
            )
        );
        let desktop = start_line(InstallKind::Desktop, "", Path::new(""), &argv(&["--cpu"]));
        assert!(desktop.place.contains("Server-Config"));
        assert_eq!(desktop.line, "--cpu");
    }

    #[test]
    fn every_outcome_has_a_headline_and_the_panel_offers_diagnose_where_flags_may_help() {
        let f = facts(
            Path::new("/nonexistent"),
            "python3",
            &argv(&["--listen", "--cpu"]),
            &DesktopPlaces::default(),
        );
        assert_eq!(f.outcomes.len(), Outcome::ALL.len());
        assert!(f.outcomes.iter().all(|o| !o.title.is_empty()));
        let offered: Vec<&str> = f
            .outcomes
            .iter()
            .filter(|o| o.flags_may_fix)
            .map(|o| o.name)
            .collect();
        assert_eq!(
            offered,
            [
                "oom",
                "accelerator_oom",
                "host_oom",
                "vbar",
                "aimdo_fault",
                "tensorrt_allocator",
                "hang",
                "crash",
                "timeout"
            ]
        );
        assert_eq!(f.flags.tested, ["--cpu"]);
        assert_eq!(f.flags.left_out, ["--listen"]);
    }
}
