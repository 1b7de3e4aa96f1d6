//! The `vrambisect` binary: parse the command line, run, exit.

use clap::Parser;

fn main() {
    let cli = vrambisect::cli::Cli::parse();
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let code = vrambisect::app::run(cli, &mut stdout.lock(), &mut stderr.lock());
    std::process::exit(code);
}
