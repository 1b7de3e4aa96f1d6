//! The `vrambisect` binary: parse the command line, run, exit.

use std::ffi::OsString;

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    // ComfyUI started from here gets a guardian (this binary again, as `__guard PGID`) that
    // kills its group if this process dies.
    if let Some(code) = vrambisect::process::guardian_command(&args) {
        std::process::exit(code);
    }
    vrambisect::process::enable_guardian();
    let cli = match vrambisect::cli::parse(&args) {
        Ok(cli) => cli,
        Err(code) => std::process::exit(code),
    };
    // Neither stream is locked for the whole command: the progress display draws to stderr
    // from its own thread, and a lock held here would block it (and every draw after it)
    // for as long as the command runs.
    let code = vrambisect::app::run(cli, &mut std::io::stdout(), &mut std::io::stderr());
    std::process::exit(code);
}
