//! Dispatch: turns parsed arguments into a command run and an exit code.

use crate::cli::{Cli, Command, ExplainArgs, Global};
use crate::error::{Error, exit};
use crate::explain;
use crate::output::{Style, write_json};
use std::io::{self, Write};

/// Runs one command, printing to `out` (stdout) and `err` (stderr); returns the exit code.
pub fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let global = cli.global.clone();
    let result = match cli.command {
        Command::Explain(args) => run_explain(args, &global, out),
    };
    match result {
        Ok(code) => code,
        Err(Failure::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => exit::OK,
        Err(Failure::Io(e)) => {
            let _ = writeln!(err, "vrambisect: error: cannot write output: {e}");
            exit::ENVIRONMENT
        }
        Err(Failure::Tool(e)) => {
            report_error(&e, &global, out, err);
            e.exit_code()
        }
    }
}

/// Prints an error as one line on stderr, and as a JSON document with `--json`.
pub fn report_error(e: &Error, global: &Global, out: &mut dyn Write, err: &mut dyn Write) {
    let style = Style::new(global.color);
    let _ = writeln!(err, "{} {e}", style.bad("error:"));
    if global.json {
        let doc = serde_json::json!({
            "error": { "message": e.message, "hint": e.hint, "exit_code": e.exit_code() }
        });
        let _ = write_json(out, &doc);
    }
}

/// Why a command stopped early.
enum Failure {
    Tool(Error),
    Io(io::Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Tool(e)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Io(e)
    }
}

fn run_explain(args: ExplainArgs, global: &Global, out: &mut dyn Write) -> Result<i32, Failure> {
    let req = explain::Request {
        comfyui: args.comfyui,
        python: args.python,
        launcher: args.launcher,
        platform: args.platform,
        args: args.args,
    };
    let e = explain::explain(&req)?;
    if global.json {
        write_json(out, &e)?;
    } else {
        explain::render(&e, &Style::new(global.color), out)?;
    }
    Ok(if e.accepted { exit::OK } else { exit::FAILED })
}
