//! `bale merge`: joins the part directories of `bale pack --part I/N`.

use std::process::ExitCode;

use anyhow::anyhow;
use bale_pack::{MergeOptions, merge};

use crate::args::merge::MergeArgs;

/// Runs `bale merge`.
pub fn run(args: MergeArgs) -> anyhow::Result<ExitCode> {
    let opts = MergeOptions {
        copy: args.copy,
        force: args.force,
    };
    let s = merge(&args.parts, &args.output, &opts)
        .map_err(|e| anyhow!("{e}\nnothing was merged: the parts are as they were"))?;
    args.out.summary(&s, || {
        format!(
            "merged {} parts into {}: {} samples in {} shards, {} ({} files renamed, {} copied) in {:.2} s",
            s.parts,
            s.output,
            s.samples,
            s.shards,
            crate::units::size(s.bytes),
            s.renamed,
            s.copied,
            s.seconds
        )
    })?;
    Ok(ExitCode::SUCCESS)
}
