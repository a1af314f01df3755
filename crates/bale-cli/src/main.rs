//! The `bale` command-line tool: a thin front over the bale libraries.
//!
//! `args/` holds the clap definitions (one file per command), `commands/`
//! the code that runs each command by calling the libraries.

mod args;
mod commands;
mod escape;
mod progress;
mod units;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    match commands::run(cli) {
        Ok(code) => code,
        Err(err) => {
            // A closed pipe (`bale ls | head`) is not an error.
            if err.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
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
            ExitCode::from(2)
        }
    }
}
