//! `bale merge`: joins the part directories of `bale pack --part I/N`.

use std::process::ExitCode;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{anyhow, bail};
use bale_format::{Manifest, ShardIndex, parse_hex64};
use bale_pack::{MergeOptions, MergeSummary, merge, plan_merge};
use bale_storage::{Publisher, StorageError, Store, WriteOptions, is_url};

use crate::commands::pack::{install_ctrlc, remote_undone};

use crate::args::merge::MergeArgs;

/// Runs `bale merge`.
pub fn run(args: MergeArgs) -> anyhow::Result<ExitCode> {
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

/// `bale merge` of parts in object storage: checks each part's objects
/// against its manifest, copies them server-side to their merged names, and
/// writes the merged manifest last. The parts are left as they are.
fn run_remote(args: &MergeArgs) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let storage = args.storage.options()?;
    let out_url = url_of(&args.output)?;
    let mut stores = Vec::new();
    let mut parts = Vec::new();
    for p in &args.parts {
        let url = url_of(p)?;
        if url.trim_end_matches('/') == out_url.trim_end_matches('/') {
            bail!("the output {out_url} is one of the parts; merge into a new prefix");
        }
        let store = Store::open(&url, &storage)?;
        let bytes = match store.object(bale_format::MANIFEST_NAME)?.get_sized(
            2,
            64 << 20,
            "manifest",
        ) {
            Ok(b) => b,
            Err(StorageError::NotFound { .. }) => bail!(
                "cannot merge {url}: it has no bale.json: the part did not finish (or is not a part)"
            ),
            Err(e) => return Err(e.into()),
        };
        let manifest = Manifest::from_slice(&bytes, Path::new(&format!("{url}/bale.json")))?;
        parts.push((PathBuf::from(&url), manifest));
        stores.push(store);
    }
    let manifests: Vec<Manifest> = parts.iter().map(|(_, m)| m.clone()).collect();
    let plan = plan_merge(parts).map_err(|e| anyhow!("{e}\nnothing was merged"))?;
    // The plan sorted the parts: find each one's store again.
    let order: Vec<usize> = plan
        .parts
        .iter()
        .map(|d| args.parts.iter().position(|p| p == d).unwrap_or(0))
        .collect();
    for &i in &order {
        check_remote_part(&stores[i], &manifests[i])?;
    }
    let cancel = Arc::new(AtomicBool::new(false));
    install_ctrlc(&cancel);
    let publisher = Publisher::open(
        &out_url,
        &storage,
        WriteOptions::from_options(&storage, args.force)?,
    )?;
    let undone = |publisher: &Publisher| match publisher.abort() {
        Ok(()) => remote_undone(&out_url),
        Err(a) => format!(
            "no dataset was written to {out_url} (no manifest), but cleaning up failed: {a}"
        ),
    };
    for f in &plan.files {
        if cancel.load(Ordering::SeqCst) {
            eprintln!("error: interrupted: {}", undone(&publisher));
            return Ok(ExitCode::from(crate::commands::pack::EXIT_INTERRUPTED));
        }
        if let Err(e) = publisher.copy_from(&stores[order[f.part]], &f.from, &f.to) {
            bail!("{e}\n{}", undone(&publisher));
        }
    }
    if let Err(e) = publisher.commit(plan.manifest.to_bytes().into()) {
        bail!("{e}\n{}", undone(&publisher));
    }
    let m = &plan.manifest;
    let s = MergeSummary {
        output: out_url.clone(),
        parts: plan.count,
        shards: m.shards.len() as u64,
        samples: m.samples,
        bytes: m.bytes,
        renamed: 0,
        copied: plan.files.len() as u64,
        skipped: m.skipped,
        seconds: start.elapsed().as_secs_f64(),
    };
    args.out.summary(&s, || {
        format!(
            "merged {} parts into {}: {} samples in {} shards, {} ({} objects copied on the server; the parts are unchanged) in {:.2} s",
            s.parts,
            s.output,
            s.samples,
            s.shards,
            crate::units::size(s.bytes),
            s.copied,
            s.seconds
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

fn url_of(p: &Path) -> anyhow::Result<String> {
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("{}: not a UTF-8 URL", p.display()))
}

/// Each shard of the part has its manifest's size, each index its checksum.
fn check_remote_part(store: &Store, manifest: &Manifest) -> anyhow::Result<()> {
    for s in &manifest.shards {
        let shard = store.object(&s.file)?;
        let len = shard.head()?;
        if len != s.bytes {
            bail!(
                "cannot merge {}: {} is {len} bytes, its manifest says {}",
                store.url(),
                shard.url(),
                s.bytes
            );
        }
        let index = store.object(&s.index)?;
        let bytes = index.get_sized(0, 1 << 34, "index")?;
        let parsed = ShardIndex::from_bytes(bytes.to_vec(), index.url())?;
        if Some(parsed.checksum()) != parse_hex64(&s.index_xxh3) {
            bail!(
                "cannot merge {}: {} does not match the checksum in its manifest",
                store.url(),
                index.url()
            );
        }
    }
    Ok(())
}
