//! Where the ComfyUI folder and its Python come from when the command line does not say:
//! the Python that ran `python -m vrambisect`, the layout around it (the portable build, a
//! venv inside or beside the ComfyUI folder, ComfyUI Desktop), and the current folder. Every
//! default carries the words that say where it came from; two candidates are an error that
//! names both, never a guess.

use crate::error::Error;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Why no ComfyUI folder could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LocateError {
    /// The Python is the venv in ComfyUI Desktop's base folder, but the app's own ComfyUI
    /// folder is not where Desktop puts it (`looked`: where it was looked for).
    #[error(
        "{} is ComfyUI Desktop's base folder, but Desktop's own ComfyUI folder was not found ({looked})",
        base.display()
    )]
    DesktopAppMissing { base: PathBuf, looked: String },
    /// Several folders could be meant.
    #[error("more than one ComfyUI folder could be meant: {}", named(.0))]
    Several(Vec<Chosen>),
    /// None was given or found where one is needed (`looked`: where it was looked for).
    #[error("no ComfyUI folder given, and none found {looked}")]
    NoneFound { looked: String },
}

fn named(candidates: &[Chosen]) -> String {
    let named: Vec<String> = candidates
        .iter()
        .map(|c| format!("{} ({})", c.path.display(), c.source))
        .collect();
    named.join(" and ")
}

impl From<LocateError> for Error {
    fn from(e: LocateError) -> Error {
        let hint = match &e {
            LocateError::DesktopAppMissing { .. } => {
                "pass --comfyui with the folder that holds ComfyUI's main.py"
            }
            LocateError::Several(_) => "pass --comfyui with the one to use",
            LocateError::NoneFound { .. } => {
                "pass --comfyui with the folder that holds ComfyUI's main.py, or run from that folder"
            }
        };
        Error::usage(e.to_string()).hint(hint)
    }
}

/// The variable through which `python -m vrambisect` tells the binary which interpreter ran
/// it (`python/vrambisect/__main__.py` sets it).
pub(crate) const PYTHON_ENV: &str = "VRAMBISECT_PYTHON";

/// The words for a Python that ran `python -m vrambisect`.
const STARTED_BY: &str = "the Python that ran python -m vrambisect";

/// The words for the Python whose scripts folder holds the program (pip put it there).
const INSTALLED_IN: &str = "the Python vrambisect is installed in";

/// The Python vrambisect was started from, and how it is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Interpreter {
    /// Absolute, links not resolved (a venv's `bin/python` is the venv, not the Python it
    /// links to).
    pub path: PathBuf,
    /// [`STARTED_BY`] or [`INSTALLED_IN`].
    pub how: &'static str,
}

impl Interpreter {
    /// The interpreter of `python -m vrambisect`.
    pub(crate) fn started_by(path: impl Into<PathBuf>) -> Interpreter {
        Interpreter {
            path: path.into(),
            how: STARTED_BY,
        }
    }

    /// The Python whose scripts folder holds `exe` (the program pip installed): a venv's
    /// `bin/` or `Scripts\` beside `pyvenv.cfg`, or the portable build's
    /// `python_embeded\Scripts\` below `python.exe`.
    pub(crate) fn installed_in(exe: &Path) -> Option<Interpreter> {
        let scripts = exe.parent()?;
        let name = scripts.file_name()?.to_str()?;
        let top = scripts.parent()?;
        let path = if name == "bin" && top.join("pyvenv.cfg").is_file() {
            scripts.join("python")
        } else if name.eq_ignore_ascii_case("Scripts") && top.join("pyvenv.cfg").is_file() {
            scripts.join("python.exe")
        } else if name.eq_ignore_ascii_case("Scripts") && top.join("python.exe").is_file() {
            top.join("python.exe")
        } else {
            return None;
        };
        path.is_file().then_some(Interpreter {
            path,
            how: INSTALLED_IN,
        })
    }
}

/// How vrambisect was started: what the defaults are found from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origin {
    /// The interpreter of `python -m vrambisect`, else the Python whose scripts folder holds
    /// the program.
    pub interpreter: Option<Interpreter>,
    /// The current folder.
    pub cwd: PathBuf,
    /// Where ComfyUI Desktop keeps its settings and its bundled ComfyUI on this machine.
    pub desktop: DesktopPlaces,
}

impl Origin {
    /// This process's origin, read from its environment once.
    pub(crate) fn current() -> &'static Origin {
        static ORIGIN: std::sync::OnceLock<Origin> = std::sync::OnceLock::new();
        ORIGIN.get_or_init(Origin::from_env)
    }

    /// The words that start this vrambisect again, for the commands it shows: the interpreter
    /// and `-m vrambisect` after `python -m vrambisect` (a user of the portable build has no
    /// `vrambisect` on PATH), else `vrambisect`.
    pub(crate) fn program(&self) -> Vec<String> {
        match &self.interpreter {
            Some(i) if i.how == STARTED_BY => vec![
                i.path.display().to_string(),
                "-m".into(),
                "vrambisect".into(),
            ],
            _ => vec!["vrambisect".into()],
        }
    }

    /// [`Origin::program`] as a command line, followed by `args`.
    pub(crate) fn command_line(&self, args: &[String]) -> String {
        let mut argv = self.program();
        argv.extend(args.iter().cloned());
        crate::text::command_line(&argv)
    }

    /// This process's origin, from its environment.
    pub(crate) fn from_env() -> Origin {
        let cwd = std::env::current_dir().unwrap_or_default();
        let interpreter = std::env::var_os(PYTHON_ENV)
            .filter(|v| !v.is_empty())
            .map(|v| Interpreter::started_by(absolute(Path::new(&v), &cwd)))
            .or_else(|| {
                let exe = std::env::current_exe().ok()?;
                Interpreter::installed_in(&exe)
            });
        Origin {
            interpreter,
            cwd,
            desktop: DesktopPlaces::here(|k| std::env::var_os(k)),
        }
    }
}

/// ComfyUI Desktop's files on one machine: its settings (`config.json`, whose `basePath` is
/// the folder holding `.venv`, `models`, `user`, ...) and the app's own ComfyUI folder (the
/// `main.py` it runs), which is not in the base folder.
#[derive(Debug, Clone, Default)]
pub(crate) struct DesktopPlaces {
    pub configs: Vec<PathBuf>,
    pub apps: Vec<PathBuf>,
}

impl DesktopPlaces {
    /// The places on this platform: Windows (`%APPDATA%\ComfyUI`, the app under
    /// `%LOCALAPPDATA%\Programs`), macOS (`~/Library/Application Support/ComfyUI`,
    /// `ComfyUI.app`), Linux (`~/.config/ComfyUI`; Desktop ships no Linux app, so only its
    /// settings are known).
    pub(crate) fn here(var: impl Fn(&str) -> Option<OsString>) -> DesktopPlaces {
        let path = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let mut places = DesktopPlaces::default();
        if cfg!(windows) {
            if let Some(roaming) = path("APPDATA") {
                places
                    .configs
                    .push(roaming.join("ComfyUI").join("config.json"));
            }
            if let Some(local) = path("LOCALAPPDATA") {
                // The installer's folder was renamed over Desktop's releases.
                for name in ["@comfyorgcomfyui-electron", "comfyui-electron", "ComfyUI"] {
                    places.apps.push(
                        local
                            .join("Programs")
                            .join(name)
                            .join("resources")
                            .join("ComfyUI"),
                    );
                }
            }
        } else if cfg!(target_os = "macos") {
            let app = Path::new("ComfyUI.app/Contents/Resources/ComfyUI");
            places.apps.push(Path::new("/Applications").join(app));
            if let Some(home) = path("HOME") {
                places.configs.push(
                    home.join("Library/Application Support/ComfyUI")
                        .join("config.json"),
                );
                places.apps.push(home.join("Applications").join(app));
            }
        } else if let Some(config) =
            path("XDG_CONFIG_HOME").or_else(|| path("HOME").map(|h| h.join(".config")))
        {
            places
                .configs
                .push(config.join("ComfyUI").join("config.json"));
        }
        places
    }

    /// The base folders Desktop's settings name (`basePath`).
    fn base_paths(&self) -> Vec<PathBuf> {
        #[derive(Deserialize)]
        struct Config {
            #[serde(rename = "basePath")]
            base_path: Option<PathBuf>,
        }
        self.configs
            .iter()
            .filter_map(|c| std::fs::read_to_string(c).ok())
            .filter_map(|t| serde_json::from_str::<Config>(t.trim_start_matches('\u{feff}')).ok())
            .filter_map(|c| c.base_path)
            .collect()
    }

    /// The app's ComfyUI folders that exist.
    fn existing_apps(&self) -> Vec<PathBuf> {
        self.apps
            .iter()
            .filter(|a| a.join("main.py").is_file())
            .cloned()
            .collect()
    }
}

/// A default, and where it came from in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chosen {
    pub path: PathBuf,
    pub source: String,
}

/// Which kind of install a ComfyUI is, for where its launch flags go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum InstallKind {
    /// The Windows portable build: `run_nvidia_gpu.bat` starts `python_embeded\python.exe`.
    Portable,
    /// ComfyUI Desktop: its settings hold the launch flags.
    Desktop,
    /// A plain Python or a venv, started by hand or by a script.
    Python,
}

/// The kind of the install whose `python` runs `comfyui` with `argv`: the portable build by
/// its `python_embeded`; Desktop where the folder is the app's own ComfyUI (as Desktop's
/// places say) or the server was started as Desktop starts it (with `--base-directory`,
/// from the app's folders); else a plain Python, also with Desktop's venv (its settings
/// would not start another folder). The paths are taken as written, in either separator, so
/// a Windows path reads the same everywhere.
pub(crate) fn install_kind(
    python: &str,
    comfyui: &str,
    argv: &[String],
    desktop: &DesktopPlaces,
) -> InstallKind {
    let plain = |p: &str| p.replace('\\', "/").to_lowercase();
    let (py, dir) = (plain(python), plain(comfyui));
    if py.contains("/python_embeded/") {
        return InstallKind::Portable;
    }
    let app = crate::paths::canonical(Path::new(comfyui));
    let desktops_app = desktop
        .apps
        .iter()
        .any(|a| crate::paths::canonical(a) == app);
    let started_as_desktop = argv.iter().any(|a| a.starts_with("--base-directory"))
        && (py.contains("comfyui desktop")
            || py.contains("/programs/comfyui/")
            || py.contains("/comfyui.app/")
            || dir.contains("/resources/comfyui"));
    if desktops_app || started_as_desktop {
        InstallKind::Desktop
    } else {
        InstallKind::Python
    }
}

/// The ComfyUI folder and the Python a command uses, each with where it came from (the
/// `defaults` of `--json`, the first lines of `run` and `bisect`, `doctor`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Defaults {
    pub comfyui: Option<Chosen>,
    pub python: Option<Chosen>,
}

impl Defaults {
    /// Two lines for a person (`ComfyUI: DIR (from ...)`), empty when nothing is known.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(c) = &self.comfyui {
            out.push(format!("ComfyUI: {} ({})", c.path.display(), c.source));
        }
        if let Some(p) = &self.python {
            out.push(format!("Python:  {} ({})", p.path.display(), p.source));
        }
        out
    }
}

/// The ComfyUI folder: `explicit` (`--comfyui`), else the one found from `python` (`--python`,
/// else the interpreter of `python -m vrambisect`) and from the current folder. `Ok(None)`
/// when nothing was found; an error when two different folders could be meant.
pub(crate) fn comfyui_dir(
    explicit: Option<&Path>,
    python: Option<&Path>,
    origin: &Origin,
) -> Result<Option<Chosen>, LocateError> {
    if let Some(dir) = explicit {
        return Ok(Some(Chosen {
            // As the install is opened (links resolved, one kind of separator on Windows).
            path: crate::paths::canonical(&absolute(dir, &origin.cwd)),
            source: "--comfyui".into(),
        }));
    }
    let mut found = Vec::new();
    let mut notes = Vec::new();
    let (interpreter, whose) = match (python, &origin.interpreter) {
        (Some(p), _) => (Some(absolute(p, &origin.cwd)), "--python"),
        (None, Some(i)) => (Some(i.path.clone()), i.how),
        (None, None) => (None, ""),
    };
    if let Some(py) = &interpreter {
        let (candidates, note) = from_interpreter(py, &origin.desktop);
        found.extend(candidates.into_iter().map(|(path, how)| Chosen {
            path,
            source: format!("{how} of {whose}"),
        }));
        notes.extend(note);
    }
    if origin.cwd.join("main.py").is_file() {
        found.push(Chosen {
            path: origin.cwd.clone(),
            source: "the current folder".into(),
        });
    }
    if origin.cwd.join("ComfyUI").join("main.py").is_file() {
        found.push(Chosen {
            path: origin.cwd.join("ComfyUI"),
            source: "the ComfyUI folder in the current folder".into(),
        });
    }
    let mut unique: Vec<Chosen> = Vec::new();
    for c in found {
        let key = crate::paths::canonical(&c.path);
        if !unique
            .iter()
            .any(|u| crate::paths::canonical(&u.path) == key)
        {
            unique.push(c);
        }
    }
    match unique.len() {
        0 => match notes.into_iter().next() {
            Some(note) => Err(note),
            None => Ok(None),
        },
        1 => Ok(unique.pop()),
        _ => Err(LocateError::Several(unique)),
    }
}

/// [`comfyui_dir`] where a command cannot go on without one: the error says what was looked
/// at.
pub(crate) fn require_comfyui_dir(
    explicit: Option<&Path>,
    python: Option<&Path>,
    origin: &Origin,
) -> Result<Chosen, LocateError> {
    comfyui_dir(explicit, python, origin)?.ok_or_else(|| {
        let looked = match (python, &origin.interpreter) {
            (Some(_), _) => "around --python or in the current folder".to_string(),
            (None, Some(i)) => format!("around {} or in the current folder", i.how),
            (None, None) => "in the current folder".to_string(),
        };
        LocateError::NoneFound { looked }
    })
}

/// The ComfyUI folders an interpreter belongs to, each with how, and a note when it is
/// Desktop's but the app's ComfyUI folder is not where Desktop puts it.
fn from_interpreter(
    py: &Path,
    desktop: &DesktopPlaces,
) -> (Vec<(PathBuf, String)>, Option<LocateError>) {
    let mut out = Vec::new();
    let mut note = None;
    let Some(bin) = py.parent() else {
        return (out, note);
    };
    // The portable build: python_embeded\python.exe beside ComfyUI\.
    if let Some(top) = bin.parent()
        && top.join("ComfyUI").join("main.py").is_file()
        && !bin.join("pyvenv.cfg").is_file()
    {
        out.push((
            top.join("ComfyUI"),
            format!("the ComfyUI folder beside {}", folder_name(bin)),
        ));
    }
    if let Some(venv) = venv_root(py) {
        let holder = venv.parent().unwrap_or(&venv);
        let name = folder_name(&venv);
        if holder.join("main.py").is_file() {
            out.push((
                holder.to_path_buf(),
                format!("the folder holding {name}, the venv"),
            ));
        } else if holder.join("ComfyUI").join("main.py").is_file() {
            // Only a ComfyUI without a Python of its own runs with a venv beside it (another
            // tool's venv may sit there too).
            let comfy = holder.join("ComfyUI");
            if own_python(&comfy, desktop).is_none() {
                out.push((comfy, format!("the ComfyUI folder beside {name}, the venv")));
            }
        } else if is_desktop_base(holder, desktop) {
            match desktop.existing_apps().into_iter().next() {
                Some(app) => out.push((
                    app,
                    format!(
                        "ComfyUI Desktop's own ComfyUI folder (its base folder {} holds {name}, the venv)",
                        holder.display()
                    ),
                )),
                None => {
                    let looked = if desktop.apps.is_empty() {
                        "Desktop has no app for this platform".to_string()
                    } else {
                        let apps: Vec<String> =
                            desktop.apps.iter().map(|a| a.display().to_string()).collect();
                        format!("looked in {}", apps.join(", "))
                    };
                    note = Some(LocateError::DesktopAppMissing {
                        base: holder.to_path_buf(),
                        looked,
                    })
                }
            }
        }
    }
    (out, note)
}

/// The Python an install runs with, and why: `explicit` (`--python`); the interpreter of
/// `python -m vrambisect` when the install is the one found from it; the install's own (a
/// venv inside it, the portable build's `python_embeded` beside it, Desktop's venv in its base
/// folder); the interpreter of `python -m vrambisect` when the install has none of its own;
/// else `python3` (`python` on Windows) on PATH.
pub(crate) fn python_for(dir: &Path, explicit: Option<&Path>, origin: &Origin) -> Chosen {
    if let Some(p) = explicit {
        // A relative path with a folder in it means "from here", not from ComfyUI's folder;
        // a bare name is looked up on PATH.
        let path = if p.components().count() > 1 {
            absolute(p, &origin.cwd)
        } else {
            p.to_path_buf()
        };
        return Chosen {
            path,
            source: "--python".into(),
        };
    }
    let dir_key = crate::paths::canonical(dir);
    if let Some(py) = &origin.interpreter {
        let (theirs, _) = from_interpreter(&py.path, &origin.desktop);
        if theirs
            .iter()
            .any(|(d, _)| crate::paths::canonical(d) == dir_key)
        {
            return Chosen {
                path: py.path.clone(),
                source: py.how.into(),
            };
        }
    }
    if let Some(own) = own_python(dir, &origin.desktop) {
        let source = match &origin.interpreter {
            Some(py) if py.how == STARTED_BY => format!(
                "{}; python -m vrambisect ran from {}, which is not this install's",
                own.source,
                py.path.display()
            ),
            _ => own.source,
        };
        return Chosen { source, ..own };
    }
    if let Some(py) = &origin.interpreter {
        return Chosen {
            path: py.path.clone(),
            source: format!("{}; the install has no Python of its own", py.how),
        };
    }
    let fallback = if cfg!(windows) { "python" } else { "python3" };
    Chosen {
        path: PathBuf::from(fallback),
        source: format!("{fallback} on PATH"),
    }
}

/// The Python that lives with an install.
fn own_python(dir: &Path, desktop: &DesktopPlaces) -> Option<Chosen> {
    let mut candidates = vec![
        (
            dir.join("venv/bin/python"),
            "the install's venv".to_string(),
        ),
        (
            dir.join(".venv/bin/python"),
            "the install's .venv".to_string(),
        ),
        (
            dir.join("venv/Scripts/python.exe"),
            "the install's venv".to_string(),
        ),
        (
            dir.join(".venv/Scripts/python.exe"),
            "the install's .venv".to_string(),
        ),
        (
            dir.join("../python_embeded/python.exe"),
            "the portable build's python_embeded".to_string(),
        ),
    ];
    let key = crate::paths::canonical(dir);
    if desktop
        .apps
        .iter()
        .any(|a| crate::paths::canonical(a) == key)
    {
        for base in desktop.base_paths() {
            let how = format!(
                "ComfyUI Desktop's venv in its base folder {}",
                base.display()
            );
            candidates.push((base.join(".venv/Scripts/python.exe"), how.clone()));
            candidates.push((base.join(".venv/bin/python"), how));
        }
    }
    candidates
        .into_iter()
        .find(|(p, _)| p.is_file())
        .map(|(path, source)| Chosen { path, source })
}

/// The venv an interpreter belongs to: `V/bin/python` or `V\Scripts\python.exe` with
/// `V/pyvenv.cfg`.
fn venv_root(py: &Path) -> Option<PathBuf> {
    let bin = py.parent()?;
    let name = bin.file_name()?.to_str()?;
    if !(name == "bin" || name.eq_ignore_ascii_case("Scripts")) {
        return None;
    }
    let root = bin.parent()?;
    root.join("pyvenv.cfg")
        .is_file()
        .then(|| root.to_path_buf())
}

/// Whether `dir` is the base folder Desktop's settings name.
fn is_desktop_base(dir: &Path, desktop: &DesktopPlaces) -> bool {
    let key = crate::paths::canonical(dir);
    desktop
        .base_paths()
        .iter()
        .any(|b| crate::paths::canonical(b) == key)
}

fn folder_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// `p` made absolute against `cwd`, without resolving links.
fn absolute(p: &Path, cwd: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

#[cfg(test)]
mod tests;
