//! The `bale` command-line tool: a thin front over the bale libraries.
//!
//! `args/` holds the clap definitions (one file per command), `commands/`
//! the code that runs each command by calling the libraries. [`run`] is the
//! whole command: the `bale` binary (`main.rs`) calls it, and so does the
//! Python wheel's `bale` entry point (`bale._native.cli_main`), so that both
//! print, exit and handle signals alike.

mod args;
mod commands;
mod escape;
mod progress;
mod units;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

/// Exit code of a run that found problems (`bale verify`).
pub const EXIT_PROBLEMS: u8 = 1;
/// Exit code of an error or a usage error.
pub const EXIT_ERROR: u8 = 2;
/// Exit code after Ctrl-C (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = commands::pack::EXIT_INTERRUPTED;

/// Runs the command line `args` (the program name first, as in
/// `std::env::args_os()`) and returns the process's exit code: 0, 1 when
/// problems were found, 2 for errors and usage errors, 130 after Ctrl-C.
///
/// It prints to the process's stdout and stderr, and may end the process
/// itself: clap's `--help` and `--version` print and return 0, but a second
/// Ctrl-C exits at once, as the binary does.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match args::Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => {
            // clap's own output: help and version on stdout, usage errors on
            // stderr (with its code, 2); a closed pipe is not an error.
            let _ = err.print();
            return u8::try_from(err.exit_code()).unwrap_or(EXIT_ERROR);
        }
    };
    match commands::run(cli) {
        Ok(code) => status(code),
        Err(err) => {
            // A closed pipe (`bale ls | head`) is not an error.
            if err.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return 0;
            }
            let mut stderr = std::io::stderr().lock();
            let mut shown = err.to_string();
            let _ = writeln!(stderr, "error: {}", escape::message(&shown));
            for cause in err.chain().skip(1) {
                // A cause already quoted whole by the line above adds nothing.
                let text = cause.to_string();
                if !shown.contains(&text) {
                    let _ = writeln!(stderr, "  caused by: {}", escape::message(&text));
                }
                shown = text;
            }
            EXIT_ERROR
        }
    }
}

/// The number an [`ExitCode`] stands for (std gives no way to read it back).
fn status(code: ExitCode) -> u8 {
    (0..=u8::MAX)
        .find(|&n| ExitCode::from(n) == code)
        .unwrap_or(EXIT_ERROR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_read_back() {
        for n in [0, 1, 2, 130, 255] {
            assert_eq!(status(ExitCode::from(n)), n);
        }
        assert_eq!(status(ExitCode::SUCCESS), 0);
        assert_eq!(status(ExitCode::FAILURE), 1);
    }

    #[test]
    fn usage_errors_and_help_give_clap_codes() {
        assert_eq!(run(["bale", "--no-such-flag"]), EXIT_ERROR);
        assert_eq!(run(["bale", "--version"]), 0);
    }
}
