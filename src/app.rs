//! Dispatch: turns parsed arguments into a command run and an exit code.

use crate::cli::{BisectArgs, Cli, Command, ExplainArgs, Global, LogscanArgs, RunArgs, SampleArgs};
use crate::error::{Error, exit};
use crate::explain;
use crate::output::{self, Answer, Style, write_json};
use std::io::{self, Write};

/// Runs one command, printing to `out` (stdout) and `err` (stderr); returns the exit code.
pub fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let global = cli.global.clone();
    let mut c = Console {
        global: &global,
        out,
        err,
    };
    let result = match cli.command {
        Command::Explain(args) => run_explain(args, &mut c),
        Command::Run(args) => run_run(args, &mut c),
        Command::Bisect(args) => run_bisect(args, &mut c),
        Command::Regress(args) => run_regress(args, &mut c),
        Command::Sample(args) => run_sample(args, &mut c),
        Command::Logscan(args) => run_logscan(args, &mut c),
        Command::Report(args) => run_report(args, &mut c),
        Command::Doctor(args) => run_doctor(args, &mut c),
        Command::Extension(args) => run_extension(args, &mut c),
        Command::Completions(args) => run_completions(args.shell, &mut c),
        Command::Man(args) => run_man(args.command.as_deref(), &mut c),
    };
    match result {
        Ok(code) => code,
        Err(Failure::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => exit::OK,
        Err(Failure::Io(e)) => {
            let _ = writeln!(c.err, "vrambisect: error: cannot write output: {e}");
            exit::ENVIRONMENT
        }
        Err(Failure::Tool(e)) => {
            report_error(&e, &global, c.out, c.err);
            e.exit_code()
        }
    }
}

/// Prints an error as one line on stderr, and as a JSON document with `--json`.
pub fn report_error(e: &Error, global: &Global, out: &mut dyn Write, err: &mut dyn Write) {
    let style = Style::new(global.color);
    // A path with a newline or an escape sequence in it stays one plain line.
    let message = crate::text::escape_controls(&e.message);
    let hint = e.hint.as_deref().map(crate::text::escape_controls);
    let line = match &hint {
        Some(hint) => format!("{message} ({hint})"),
        None => message.to_string(),
    };
    let _ = writeln!(err, "{} {line}", style.bad("error:"));
    if global.json {
        let doc = serde_json::json!({
            "error": { "message": message, "hint": hint, "exit_code": e.exit_code() }
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

fn run_explain(args: ExplainArgs, c: &mut Console) -> Result<i32, Failure> {
    let e = explain::explain(&args)?;
    let code = if e.accepted == Some(false) {
        exit::FAILED
    } else {
        exit::OK
    };
    c.answer(&e, code)
}

fn run_run(args: RunArgs, c: &mut Console) -> Result<i32, Failure> {
    use crate::run;
    use std::io::IsTerminal;
    // Before anything is made that must be cleaned up (the stand-in's copy, a run folder).
    crate::signals::install();
    let comfyui = comfyui_folder(args.comfyui.as_deref(), args.python.as_deref())?;
    let target = run::Target::load(&comfyui, args.python.as_deref(), &args.workflow)?;
    say_defaults(&target.defaults, c.err)?;
    let run_dir = match &args.output {
        Some(dir) => dir.clone(),
        None => run::folder::fresh(std::path::Path::new("vrambisect-runs"), "run"),
    };
    let run_dir = run::folder::create(&run_dir)?;
    let limits = args.limits.limits(args.min_available_ram);
    let opts = run::RunOptions {
        comfy_flags: args.flags.clone(),
        nvml_lib: args.nvml_lib.clone(),
        cuda: args.cuda,
        // A single run is shortened only when asked for by a step count.
        quick: match args.quick {
            crate::workflow::quick::Quick::Steps(n) => crate::workflow::quick::Quick::Steps(n),
            _ => crate::workflow::quick::Quick::Off,
        },
        ..run::RunOptions::new(target, limits, run_dir)
    };
    let record = {
        let mut progress = run::render::Progress::new(!c.global.json && io::stderr().is_terminal());
        run::execute(&opts, &mut progress)?
    };
    c.answer(&record, run_exit_code(&record))
}

/// The ComfyUI folder a command works on: given, or found from the Python that ran
/// vrambisect and from the current folder.
fn comfyui_folder(
    comfyui: Option<&std::path::Path>,
    python: Option<&std::path::Path>,
) -> Result<crate::locate::Chosen, Failure> {
    let origin = crate::locate::Origin::current();
    Ok(crate::locate::require_comfyui_dir(comfyui, python, origin).map_err(Error::from)?)
}

/// ComfyUI's flags and environment: read from a launcher (the flags given filling its
/// arguments), or the flags given.
fn launch_of(
    launcher: Option<&std::path::Path>,
    flags: &[String],
) -> Result<crate::launcher::Launch, Failure> {
    Ok(match launcher {
        Some(path) => crate::launcher::read_file(path, flags)?,
        None => crate::launcher::Launch::from_command_line(flags),
    })
}

/// Where a command writes: its answer on `out` (JSON with `--json`), everything else on
/// `err`.
struct Console<'a> {
    global: &'a Global,
    out: &'a mut dyn Write,
    err: &'a mut dyn Write,
}

impl Console<'_> {
    /// Prints the command's answer (JSON with `--json`, its text otherwise) and gives its exit
    /// status.
    fn answer(&mut self, a: &impl Answer, code: i32) -> Result<i32, Failure> {
        let style = Style::new(self.global.color);
        answered(output::print(a, self.global.json, &style, self.out), code)
    }
}

/// A command's exit status once its answer is printed. A reader that went away (the other end
/// of a pipe closed) changes nothing: the status is still the answer's.
fn answered(printed: io::Result<()>, code: i32) -> Result<i32, Failure> {
    match printed {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(Failure::Io(e)),
        _ => Ok(code),
    }
}

/// The first lines of `run` and `bisect`: which ComfyUI folder and Python, and why (on
/// stderr, so that `--json` keeps stdout to itself).
fn say_defaults(defaults: &crate::locate::Defaults, err: &mut dyn Write) -> io::Result<()> {
    for line in defaults.lines() {
        writeln!(err, "{line}")?;
    }
    Ok(())
}

/// `git bisect run` semantics: 0 pass, 1 fail, 125 untestable; 130 after Ctrl-C.
pub fn run_exit_code(record: &crate::run::RunRecord) -> i32 {
    use crate::outcome::Outcome;
    match record.outcome {
        Outcome::Pass => exit::OK,
        Outcome::Interrupted if crate::signals::requested() != crate::signals::Stop::No => {
            exit::INTERRUPTED
        }
        o if o.is_untestable() => exit::UNTESTABLE,
        _ => exit::FAILED,
    }
}

fn run_sample(args: SampleArgs, c: &mut Console) -> Result<i32, Failure> {
    use crate::sampler::command;
    use std::io::IsTerminal;
    let req = command::Request {
        interval: args.interval,
        duration: args.duration,
        output: args.output,
        pid: args.pid,
        command: args.command,
        comfy_url: args.comfyui_url,
        cuda: args.cuda,
        nvml_lib: args.nvml_lib,
        live: !c.global.json && io::stderr().is_terminal(),
        json: c.global.json,
    };
    let outcome = command::sample(&req, c.err)?;
    c.answer(&outcome.report, outcome.exit_code)
}

fn run_bisect(args: BisectArgs, c: &mut Console) -> Result<i32, Failure> {
    use std::io::IsTerminal;
    crate::signals::install();
    let req = bisect_request(args)?;
    let visible = !c.global.json && io::stderr().is_terminal();
    let (result, code) = crate::bisect::command::run(&req, visible, c.err)?;
    c.answer(&result, code)
}

/// `bisect`'s arguments as the bisect's own request (a launcher read, paths made absolute).
fn bisect_request(args: BisectArgs) -> Result<crate::bisect::command::Request, Failure> {
    use crate::bisect::command::{NewSession, Request, Session};
    let session = match (args.resume, args.workflow) {
        (Some(dir), _) => Session::Resume(dir),
        (None, Some(workflow)) => {
            let comfyui = comfyui_folder(args.comfyui.as_deref(), args.python.as_deref())?;
            let launch = launch_of(args.launcher.as_deref(), &args.base)?;
            Session::New(Box::new(NewSession {
                comfyui,
                workflow,
                python: args.python,
                launcher: args.launcher,
                base_flags: launch.args,
                env: launch.env,
                toggles: args.toggle,
                strategy: args.strategy.into(),
                repeat: args.repeat,
                limits: args.limits.limits(args.min_available_ram),
                output: args.output,
                custom_nodes_check: !args.no_custom_nodes_check,
                quick: args.quick,
                overlay: None,
                first_fix: args.first_fix,
                failed_log: args.failed_log,
            }))
        }
        // clap requires it without --resume.
        (None, None) => {
            return Err(Failure::Tool(Error::usage(
                "--workflow is needed (or --resume DIR)",
            )));
        }
    };
    Ok(Request {
        session,
        max_runs: args.max_runs,
        confidence: args.confidence,
        min_available_ram: args.min_available_ram,
        nvml_lib: args.nvml_lib,
    })
}

fn run_regress(args: crate::cli::RegressArgs, c: &mut Console) -> Result<i32, Failure> {
    use crate::regress::Request;
    crate::signals::install();
    if args.clean_cache {
        let root = crate::regress::env::root();
        let (count, bytes) = crate::regress::env::clean()
            .map_err(|e| crate::error::io_error("remove the environments in", &root, &e))?;
        let _ = writeln!(
            c.err,
            "regress: removed {} ({}) from {}",
            crate::text::plural(count, "environment"),
            crate::text::mib(bytes),
            root.display()
        );
        if args.resume.is_none() && args.workflow.is_none() {
            return Ok(crate::error::exit::OK);
        }
    }
    let req = match args.resume {
        Some(dir) => Request::Resume {
            dir,
            max_runs: args.max_runs,
        },
        None => {
            let (Some(workflow), Some(good)) = (args.workflow, args.good) else {
                return Err(Failure::Tool(Error::usage(
                    "--workflow and --good are needed (or --resume DIR)",
                )));
            };
            let comfyui = comfyui_folder(args.comfyui.as_deref(), args.python.as_deref())?;
            let launch = launch_of(args.launcher.as_deref(), &args.flags)?;
            Request::New(crate::regress::NewSession {
                comfyui,
                workflow,
                python: args.python,
                launcher: args.launcher,
                flags: launch.args,
                env: launch.env,
                good,
                bad: args.bad,
                regress: args.regress,
                repeat: args.repeat,
                limits: args.limits.limits(None),
                max_runs: args
                    .max_runs
                    .unwrap_or(crate::bisect::session::DEFAULT_MAX_RUNS),
                confidence: args.confidence,
                output: args.output,
                quick: args.quick,
                install: !args.no_install,
                then_bisect: args.then_bisect,
            })
        }
    };
    let quiet = c.global.json;
    let mut progress = |line: &str| {
        if !quiet {
            let _ = writeln!(c.err, "regress: {line}");
        }
    };
    let (result, code) = crate::regress::run(req, &mut progress)?;
    c.answer(&result, code)
}

fn run_logscan(args: LogscanArgs, c: &mut Console) -> Result<i32, Failure> {
    let report = crate::logscan::command(&args.file, c.err)?;
    c.answer(&report, report.exit_code())
}

fn run_report(args: crate::cli::ReportArgs, c: &mut Console) -> Result<i32, Failure> {
    let style = Style::new(c.global.color);
    if args.no_redact {
        writeln!(
            c.err,
            "{} --no-redact: the bundle keeps home folders, user and host names, tokens and API keys as recorded; read every file before sharing it",
            style.warn("warning:")
        )?;
    }
    let req = crate::report::Request {
        dir: args.dir,
        failure: args.log.map(|log| crate::report::failure::FailureFiles {
            log,
            workflow: args.workflow,
            history: args.history,
        }),
        output: args.output,
        redact: !args.no_redact,
        comfyui: args.comfyui,
        python: args.python,
        nvml_lib: args.nvml_lib,
    };
    let built = crate::report::build(&req)?;
    c.answer(&built, exit::OK)
}

fn run_doctor(args: crate::cli::DoctorArgs, c: &mut Console) -> Result<i32, Failure> {
    let req = crate::doctor::Request {
        comfyui: args.comfyui,
        python: args.python,
        nvml_lib: args.nvml_lib,
        origin: crate::locate::Origin::current().clone(),
    };
    let report = crate::doctor::run(&req);
    c.answer(&report, report.exit_code())
}

fn run_extension(args: crate::cli::ExtensionArgs, c: &mut Console) -> Result<i32, Failure> {
    use crate::cli::ExtensionAction;
    let folder =
        |t: &crate::cli::ExtensionTarget| comfyui_folder(t.comfyui.as_deref(), t.python.as_deref());
    let done = match &args.action {
        ExtensionAction::Install(t) => crate::extension::install(&folder(t)?.path)?,
        ExtensionAction::Remove(t) => crate::extension::remove(&folder(t)?.path)?,
        ExtensionAction::Facts(f) => return extension_facts(f, c),
    };
    c.answer(&done, crate::error::exit::OK)
}

/// `extension facts`: what the extension asks of this program for a server.
fn extension_facts(f: &crate::cli::FactsArgs, c: &mut Console) -> Result<i32, Failure> {
    let comfyui = comfyui_folder(f.comfyui.as_deref(), f.python.as_deref())?;
    let origin = crate::locate::Origin::current();
    let python = crate::locate::python_for(&comfyui.path, f.python.as_deref(), origin);
    // The folder as the user (or the extension) gave it, for the line to read the same.
    let given = f
        .comfyui
        .as_deref()
        .and_then(|d| std::path::absolute(d).ok());
    let facts = crate::extension::facts::facts(
        given.as_deref().unwrap_or(&comfyui.path),
        &python.path.display().to_string(),
        &f.args,
        &origin.desktop,
    );
    c.answer(&facts, crate::error::exit::OK)
}

/// `completions`: the script for one shell.
#[derive(serde::Serialize)]
struct Completions {
    // In the order `--json` has always printed them.
    script: String,
    shell: String,
}

impl Answer for Completions {
    fn render(&self, _: &Style, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(self.script.as_bytes())
    }
}

/// `man`: the manual page, in roff.
#[derive(serde::Serialize)]
struct ManPage {
    roff: String,
}

impl Answer for ManPage {
    fn render(&self, _: &Style, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(self.roff.as_bytes())
    }
}

fn run_completions(shell: clap_complete::Shell, c: &mut Console) -> Result<i32, Failure> {
    use clap::CommandFactory;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "vrambisect", &mut script);
    let script = Completions {
        script: String::from_utf8_lossy(&script).into_owned(),
        shell: shell.to_string(),
    };
    c.answer(&script, exit::OK)
}

/// vrambisect's page, or with `command` that command's page (vrambisect-COMMAND(1), which
/// the main page's list of commands names).
fn run_man(command: Option<&str>, c: &mut Console) -> Result<i32, Failure> {
    use clap::CommandFactory;
    let mut cli = Cli::command();
    cli.build();
    let cmd = match command {
        None => cli,
        Some(name) => {
            // `extension-install`: a command's own command, as its page names it.
            let mut found = Some(&cli);
            for part in name.split('-') {
                found = found
                    .and_then(|c| c.find_subcommand(part))
                    .filter(|c| !c.is_hide_set());
            }
            let Some(sub) = found else {
                let visible: Vec<&str> = cli
                    .get_subcommands()
                    .filter(|s| !s.is_hide_set() && s.get_name() != "help")
                    .map(|s| s.get_name())
                    .collect();
                return Err(Failure::Tool(
                    Error::usage(format!("no command named {name:?}"))
                        .hint(format!("one of {}", visible.join(", "))),
                ));
            };
            sub.clone()
                .name(format!("vrambisect-{name}"))
                .bin_name(format!("vrambisect {}", name.replace('-', " ")))
                .version(env!("CARGO_PKG_VERSION"))
        }
    };
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut page)?;
    let page = ManPage {
        roff: String::from_utf8_lossy(&page).into_owned(),
    };
    c.answer(&page, exit::OK)
}
