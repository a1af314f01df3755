//! `bale merge`: joins the part directories of `bale pack --part I/N`.

use std::process::ExitCode;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{anyhow, bail};
use bale_pack::{JOURNAL_NAME, MergeOptions, PackError, merge_cancellable, merge_remote};
use bale_storage::is_url;

use crate::commands::pack::{install_ctrlc, is_cancel};

use crate::args::merge::MergeArgs;

/// Runs `bale merge`.
pub fn run(args: MergeArgs) -> anyhow::Result<ExitCode> {
    super::notices(args.out.quiet);
    let remote_parts = args.parts.iter().filter(|p| is_url(p)).count();
    if is_url(&args.output) || remote_parts > 0 {
        anyhow::ensure!(
            is_url(&args.output) && remote_parts == args.parts.len(),
            "bale merge joins local parts into a local directory, or parts in object storage into a prefix of their bucket (server-side copies); upload the parts first, or merge locally"
        );
        return run_remote(&args);
    }
    let opts = MergeOptions {
        copy: args.copy,
        force: args.force,
        allow_duplicate_keys: args.allow_duplicate_keys,
    };
    let cancel = Arc::new(AtomicBool::new(false));
    install_ctrlc(&cancel);
    let journal = args.output.join(JOURNAL_NAME);
    let left = || {
        if journal.exists() {
            format!(
                "files of the parts are still in {}: {} lists them; run the same `bale merge` again to put them back",
                bale_format::shown(&args.output),
                bale_format::shown(&journal)
            )
        } else {
            "nothing was merged: the parts are as they were".to_owned()
        }
    };
    let s = match merge_cancellable(&args.parts, &args.output, &opts, &cancel) {
        Ok(s) => s,
        Err(PackError::Cancelled) => {
            eprintln!("error: interrupted: {}", left());
            return Ok(ExitCode::from(crate::commands::pack::EXIT_INTERRUPTED));
        }
        Err(e) => bail!("{e}\n{}", left()),
    };
    if s.recovered > 0 {
        eprintln!(
            "note: an earlier `bale merge` into {} was killed part way: {} of its files were put right first",
            bale_format::shown(&args.output),
            s.recovered
        );
    }
    args.out.summary(&s, || {
        format!(
            "merged {} into {}: {} in {}, {} ({} renamed, {} copied) in {:.2} s",
            crate::units::count(s.parts, "part"),
            s.output,
            crate::units::count(s.samples, "sample"),
            crate::units::count(s.shards, "shard"),
            crate::units::size(s.bytes),
            crate::units::count(s.renamed, "file"),
            s.copied,
            s.seconds
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `bale merge` of parts in object storage ([`merge_remote`]).
fn run_remote(args: &MergeArgs) -> anyhow::Result<ExitCode> {
    let storage = args.storage.options()?;
    let utf8 = |p: &Path| -> anyhow::Result<String> {
        p.to_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("{}: not a UTF-8 URL", bale_format::shown(p)))
    };
    let out_url = utf8(&args.output)?;
    let parts: Vec<String> = args
        .parts
        .iter()
        .map(|p| utf8(p))
        .collect::<anyhow::Result<_>>()?;
    let cancel = Arc::new(AtomicBool::new(false));
    install_ctrlc(&cancel);
    let opts = MergeOptions {
        copy: true,
        force: args.force,
        allow_duplicate_keys: args.allow_duplicate_keys,
    };
    let s = match merge_remote(&parts, &out_url, &storage, &opts, &cancel) {
        Ok(s) => s,
        // Before the output was taken (--force watching a lock): nothing
        // was written there.
        Err(PackError::Cancelled | PackError::Storage(bale_storage::StorageError::Cancelled)) => {
            return Ok(crate::commands::pack::interrupted_opening(&args.output));
        }
        Err(PackError::Undone { error, undone }) if is_cancel(&error) => {
            eprintln!("error: interrupted: {}", undone.text);
            return Ok(ExitCode::from(crate::commands::pack::EXIT_INTERRUPTED));
        }
        Err(e @ PackError::Undone { .. }) => bail!("{e}"),
        Err(e) if e.left_output_untouched() || matches!(e, PackError::Merge { .. }) => {
            bail!("{e}\nnothing was merged")
        }
        // Any failure after the output was taken is `Undone`: this one
        // came before, and the output is as it was.
        Err(e) => bail!("{e}\nnothing was merged; what is under {out_url} is as it was"),
    };
    args.out.summary(&s, || {
        format!(
            "merged {} into {}: {} in {}, {} ({} copied on the server; the parts are unchanged) in {:.2} s",
            crate::units::count(s.parts, "part"),
            s.output,
            crate::units::count(s.samples, "sample"),
            crate::units::count(s.shards, "shard"),
            crate::units::size(s.bytes),
            crate::units::count(s.copied, "object"),
            s.seconds
        )
    })?;
    Ok(ExitCode::SUCCESS)
}
