//! Flags shared by the commands that write a dataset.

/// `--quiet` and `--json`.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct OutputFlags {
    /// No progress bar, notes, warnings or summary line (errors are still printed).
    #[arg(short, long)]
    pub quiet: bool,

    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

impl OutputFlags {
    /// Prints the command's summary: `value` as JSON with `--json`, else the
    /// line `line` gives, unless `--quiet`.
    ///
    /// # Errors
    /// Writing to stdout.
    pub fn summary(
        &self,
        value: &impl serde::Serialize,
        line: impl FnOnce() -> String,
    ) -> anyhow::Result<()> {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        if self.json {
            writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
        } else if !self.quiet {
            writeln!(out, "{}", line())?;
        }
        Ok(())
    }
}
