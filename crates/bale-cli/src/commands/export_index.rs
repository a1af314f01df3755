//! `bale export-index`: other tools' index files from bale's indexes.

use std::path::Path;
use std::process::ExitCode;

use bale_pack::{DaliSummary, export_dali_index};

use crate::args::export_index::ExportIndexArgs;
use crate::args::output::OutputFlags;

/// Runs `bale export-index`.
pub fn run(args: ExportIndexArgs) -> anyhow::Result<ExitCode> {
    debug_assert!(args.dali);
    let s = export_dali_index(&args.dataset, &args.output, args.force)?;
    print_summary(&args.out, &s)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints what `export_dali_index` wrote (also after `pack` / `index
/// --dali-index`, on stderr there, as their own summary owns stdout).
pub fn print_summary(out: &OutputFlags, s: &DaliSummary) -> anyhow::Result<()> {
    out.summary(s, || line(s))
}

/// The one-line summary.
pub fn line(s: &DaliSummary) -> String {
    format!(
        "wrote {} ({}) to {}",
        crate::units::count(s.files.len(), "DALI index file"),
        crate::units::count(s.samples, "sample"),
        crate::escape::message(&s.output.display().to_string())
    )
}

/// Checks what `--dali-index DIR` of `pack` / `index` can know before the
/// dataset is written: DIR is not the output.
pub fn precheck(dali: Option<&Path>, output: &Path) -> anyhow::Result<()> {
    let Some(dir) = dali else {
        return Ok(());
    };
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let same = match (std::fs::canonicalize(dir), std::fs::canonicalize(output)) {
        (Ok(a), Ok(b)) => a == b,
        _ => abs(dir) == abs(output),
    };
    if same {
        anyhow::bail!(
            "--dali-index {}: that is the dataset directory; give DALI's index files a directory of their own",
            bale_format::shown(dir)
        );
    }
    Ok(())
}

/// Writes DALI's index files for the dataset just written in `dataset`
/// (`--dali-index DIR` of `pack` and `index`), saying so on stderr.
pub fn after_write(
    dali: Option<&Path>,
    dataset: &Path,
    force: bool,
    out: &OutputFlags,
) -> anyhow::Result<()> {
    let Some(dir) = dali else {
        return Ok(());
    };
    let s = export_dali_index(dataset, dir, force).map_err(|error| super::Noted {
        error,
        note: format!(
            "the dataset in {} is complete; only DALI's index files were not written (rerun `bale export-index --dali {} -o DIR`)",
            bale_format::shown(dataset),
            bale_format::shown(dataset)
        ),
    })?;
    if !out.quiet && !out.json {
        eprintln!("{}", line(&s));
    }
    Ok(())
}
