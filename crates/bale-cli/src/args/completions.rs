//! Arguments of `bale completions` and `bale man`.

use std::path::PathBuf;

/// Print a shell completion script for bale.
///
/// The script is generated from bale's own command-line definitions, so it
/// completes every command and option of this version. Load it once per
/// shell, or install it where the shell looks for completions.
#[derive(Debug, clap::Args)]
#[command(after_long_help = COMPLETION_EXAMPLES)]
pub struct CompletionsArgs {
    /// The shell to write the script for.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// Shown after the options by `bale completions --help` (verbatim).
const COMPLETION_EXAMPLES: &str = "\
Examples:
  source <(bale completions bash)                      this bash session
  bale completions bash > ~/.local/share/bash-completion/completions/bale
  bale completions zsh > \"${fpath[1]}/_bale\"           zsh (then restart it)
  bale completions fish > ~/.config/fish/completions/bale.fish";

/// Print bale's manual page (roff), or write one page per command.
///
/// Without `--dir`, the page of `bale` itself goes to stdout: `bale man |
/// man -l -`. With `--dir DIR`, DIR receives `bale.1` and one page per
/// command (`bale-pack.1`, ...), for `MANPATH` or `/usr/local/share/man/man1`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write bale.1 and a page per command (bale-pack.1, ...) into this directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}
