//! The `bale` binary: [`bale_cli::run`] over the process's arguments.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(bale_cli::run(std::env::args_os()))
}
