//! `bale merge`: joins the part directories of `bale pack --part I/N`.

use std::process::ExitCode;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bale_pack::{MergeOptions, is_remote, merge_into};

use crate::commands::pack::install_ctrlc;

use crate::args::merge::MergeArgs;

/// Runs `bale merge`.
pub fn run(args: MergeArgs) -> anyhow::Result<ExitCode> {
    super::notices(args.out.quiet);
    let opts = MergeOptions {
        copy: args.copy,
        force: args.force,
        allow_duplicate_keys: args.allow_duplicate_keys,
    };
    let cancel = Arc::new(AtomicBool::new(false));
    install_ctrlc(&cancel);
    let s = match merge_into(&args.parts, &args.output, &opts, &cancel, &|| {
        args.storage.options()
    }) {
        Ok(s) => s,
        Err(f) => return super::failed(f),
    };
    if is_remote(&args.output) {
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
        return Ok(ExitCode::SUCCESS);
    }
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
