//! ComfyUI's command line: the flag model, argparse's rules, and what the flags do to memory.
//!
//! - [`defs`]: every memory-, offload-, cache- and device-related flag as data.
//! - [`help`]: an install's real flag list, read from `python main.py --help`.
//! - [`argparse`]: how ComfyUI's argparse reads a command line (prefixes, groups, errors).
//! - [`decide`]: what a parsed command line does (Dynamic VRAM, VRAM state, reserve, no-ops).
//! - [`profile`]: built-in flag lists for known versions, for when no install is at hand.
//! - [`history`]: when each recorded flag arrived, and the flags the model leaves out on purpose.
//! - [`hints`]: what to say about a flag an install does not know.
//! - `split_server_flags`: a server's flags as a diagnosis tests them, and those it leaves out.

pub mod argparse;
pub mod decide;
pub(crate) mod defs;
pub mod help;
pub(crate) mod hints;
pub(crate) mod history;
pub mod profile;

/// Flags that say how a server is reached or where it keeps its user files, not what it does
/// with memory. A diagnosis of a running server starts its own ComfyUI on loopback with the
/// install's own user folder (its runs must not write into that server's settings and
/// database), so it leaves these out of the flags it tests, and puts them back in the launch
/// line it gives.
pub const SERVER_ONLY: &[&str] = &[
    "--listen",
    "--port",
    "--tls-keyfile",
    "--tls-certfile",
    "--enable-cors-header",
    "--auto-launch",
    "--disable-auto-launch",
    "--front-end-version",
    "--front-end-root",
    "--multi-user",
    "--user-directory",
];

/// A server's launch flags, split as argparse reads them (a flag with its values, a prefix of
/// a flag's name): the ones a diagnosis tests and the [`SERVER_ONLY`] ones it leaves out,
/// each in the order given. What argparse would not take stays with the tested ones.
pub(crate) fn split_server_flags(
    argv: &[String],
    version: Option<&crate::version::Version>,
) -> (Vec<String>, Vec<String>) {
    let set = profile::builtin(version).flags;
    let parsed = argparse::parse(&set, argv, version);
    let mut left_out = vec![false; argv.len()];
    for g in parsed
        .given
        .iter()
        .filter(|g| SERVER_ONLY.contains(&g.flag.as_str()))
    {
        for i in g.args.clone() {
            left_out[i] = true;
        }
    }
    let (out, kept): (Vec<_>, Vec<_>) = argv.iter().zip(left_out).partition(|(_, out)| *out);
    (
        kept.into_iter().map(|(a, _)| a.clone()).collect(),
        out.into_iter().map(|(a, _)| a.clone()).collect(),
    )
}

#[cfg(test)]
mod split_tests {
    use super::split_server_flags;

    fn split(argv: &[&str]) -> (Vec<String>, Vec<String>) {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        split_server_flags(&argv, None)
    }

    #[test]
    fn networking_and_user_folder_flags_are_left_out_with_their_values() {
        let (kept, out) = split(&[
            "--listen",
            "--port",
            "8000",
            "--highvram",
            "--enable-cors-header",
            "--tls-keyfile",
            "k",
            "--listen=0.0.0.0",
            "--front-end-root",
            "/x",
            "--reserve-vram",
            "2",
            "--disable-auto-launch",
        ]);
        assert_eq!(kept, ["--highvram", "--reserve-vram", "2"]);
        assert_eq!(
            out,
            [
                "--listen",
                "--port",
                "8000",
                "--enable-cors-header",
                "--tls-keyfile",
                "k",
                "--listen=0.0.0.0",
                "--front-end-root",
                "/x",
                "--disable-auto-launch"
            ]
        );
        assert_eq!(split(&["--listen", "0.0.0.0", "--cpu"]).0, ["--cpu"]);
        // An optional value is taken only where one follows.
        assert_eq!(
            split(&["--listen", "--port=1", "--cpu", "--enable-cors-header", "*"]),
            (
                vec!["--cpu".to_string()],
                ["--listen", "--port=1", "--enable-cors-header", "*"]
                    .map(String::from)
                    .to_vec()
            )
        );
    }

    #[test]
    fn a_prefix_is_read_as_comfyui_reads_it_and_unknown_words_stay() {
        let (kept, out) = split(&["--user-dir", "/u", "--mystery", "x", "--lowvram"]);
        assert_eq!(out, ["--user-dir", "/u"]);
        assert_eq!(kept, ["--mystery", "x", "--lowvram"]);
    }
}
