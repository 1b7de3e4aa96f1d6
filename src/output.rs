//! Terminal styling and the `--color` choice (honouring `NO_COLOR`).

use std::io::IsTerminal;

/// `--color auto|always|never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    #[default]
    Auto,
    Always,
    Never,
}

/// Whether to colour what goes to `stream`: always or never as asked; for `auto`, only on a
/// terminal, without `NO_COLOR` (no-color.org), and not on a `TERM=dumb` terminal.
pub fn color_enabled(choice: ColorChoice, stream: impl IsTerminal) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => color_allowed() && stream.is_terminal(),
    }
}

/// Whether the environment allows colour at all: no `NO_COLOR`, no `TERM=dumb`.
pub fn color_allowed() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
    !no_color && !dumb
}

/// Paints text with ANSI colours when enabled.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    enabled: bool,
}

impl Style {
    /// Colours on for `always`; for `auto` only on a terminal that can show them.
    pub fn new(choice: ColorChoice) -> Style {
        Style {
            enabled: color_enabled(choice, std::io::stdout()),
        }
    }

    /// No colours (tests, files).
    pub fn plain() -> Style {
        Style { enabled: false }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.enabled {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn good(&self, text: &str) -> String {
        self.paint("32", text)
    }
    pub fn warn(&self, text: &str) -> String {
        self.paint("33", text)
    }
    pub fn bad(&self, text: &str) -> String {
        self.paint("1;31", text)
    }
    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }
    pub fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }
}

/// What a command answers. Each command's result says how it reads as text; whether it is
/// printed as text or as one JSON document (`--json`) is decided in one place, [`print`].
pub trait Answer: serde::Serialize {
    /// The answer for a person.
    fn render(&self, style: &Style, out: &mut dyn std::io::Write) -> std::io::Result<()>;
}

/// Prints a command's answer: JSON with `--json`, its text otherwise.
pub fn print(
    answer: &impl Answer,
    json: bool,
    style: &Style,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    if json {
        write_json(out, answer)
    } else {
        answer.render(style, out)
    }
}

/// Writes `value` as one pretty JSON document and a newline.
pub fn write_json(
    out: &mut dyn std::io::Write,
    value: &impl serde::Serialize,
) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)
}

/// A table for the terminal or a pipe. It wraps to the terminal's width only when that width
/// is known and usable: a terminal that reports no size (a pseudo-terminal nobody sized, some
/// CI consoles) says 0 columns, and wrapping to that writes one character per line.
pub fn table() -> comfy_table::Table {
    use comfy_table::ContentArrangement;
    let mut table = comfy_table::Table::new();
    let arrangement = match table.width() {
        Some(w) if w >= 40 => ContentArrangement::Dynamic,
        _ => ContentArrangement::Disabled,
    };
    table.set_content_arrangement(arrangement);
    table
}

/// The one live status line on stderr (progress bar and spinner) and the lines printed
/// above it. Drawn from indicatif's own thread; nothing here holds a lock across a run, so a
/// draw can never wait for the command. Hidden when stderr is not a terminal, where the lines
/// that must be seen anyway go straight to stderr.
pub struct StatusLine {
    pub bar: indicatif::ProgressBar,
    visible: bool,
    /// When the last line was said (for the heartbeat without a terminal).
    last_said: std::time::Instant,
}

/// Without a terminal, how long a run may go without a line before a heartbeat says it goes on.
const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(10);

impl StatusLine {
    /// A status line drawn with `template` (indicatif's syntax), `length` steps long when it
    /// counts something.
    pub fn new(visible: bool, template: &str, length: Option<u64>) -> StatusLine {
        use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
        // Hidden, it still counts (its length and position feed bisect's progress.json).
        let target = if visible {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(length, target);
        bar.set_style(
            ProgressStyle::with_template(template)
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(150));
        StatusLine {
            bar,
            visible,
            last_said: std::time::Instant::now(),
        }
    }

    /// A line that must reach the user even without a terminal (waiting, stopping, a run's
    /// result): above the status line on a terminal, plainly on stderr elsewhere.
    pub fn say(&mut self, msg: String) {
        self.last_said = std::time::Instant::now();
        if self.visible {
            self.bar.println(msg);
        } else {
            // A closed stderr (the reader of a pipe went away) is no reason to stop a run.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "{msg}");
        }
    }
}

impl StatusLine {
    /// Without a terminal, says `what` (built only then) when nothing was said for a while,
    /// so a log or a CI console shows that a long run is still going.
    pub fn heartbeat(&mut self, what: impl FnOnce() -> String) {
        if !self.visible && self.last_said.elapsed() >= HEARTBEAT {
            self.say(what());
        }
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
