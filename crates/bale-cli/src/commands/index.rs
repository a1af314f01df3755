//! `bale index`: adopts existing WebDataset tars in place. Expands the shard
//! patterns, scans each tar with [`bale_format::scan`] (in parallel), writes
//! one index per tar into the dataset directory, then the manifest (shard
//! paths relative to it, or absolute) and, if asked, a wids shard index.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, anyhow, bail};
use bale_format::scan::{ScanOptions, ScannedShard, SplitPolicy, scan_shard};
use bale_format::{Compression, CreatedBy, MANIFEST_NAME, Manifest, ShardEntry, index_file_name};
use rayon::prelude::*;
use serde::Serialize;

use crate::args::index::IndexArgs;
use crate::commands::pack::human_bytes;
use crate::progress;

/// Largest number of names one brace pattern may expand to.
const MAX_EXPANSION: usize = 10_000_000;

/// One shard to index.
#[derive(Debug)]
struct Planned {
    /// The path as the user gave it (or a pattern produced it).
    given: PathBuf,
    /// Canonical absolute path.
    canonical: PathBuf,
    /// Index file name in the output directory.
    index: String,
    /// Path the manifest records.
    file: String,
}

/// What one shard gave, for the summary.
#[derive(Debug, Serialize)]
struct ShardSummary {
    file: String,
    index: String,
    samples: u64,
    members: u64,
    bytes: u64,
    compression: Compression,
    skipped_not_files: u64,
    skipped_no_extension: u64,
    stripped_dot_slash: u64,
    renamed: usize,
    /// Later runs of a key joined to its first run (`--allow-split`).
    regrouped: usize,
    /// The index is scattered (layout 1.1): the shard has regrouped samples.
    scattered: bool,
    long_names: u64,
}

#[derive(Debug, Serialize)]
struct Summary {
    output: String,
    shards: Vec<ShardSummary>,
    samples: u64,
    members: u64,
    bytes: u64,
    bytes_read: u64,
    checksums: bool,
    wids_json: Option<String>,
    seconds: f64,
}

/// Runs `bale index`.
pub fn run(args: IndexArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let paths = expand_all(&args.shards)?;
    let existed = args.output.exists();
    fs::create_dir_all(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    let out = fs::canonicalize(&args.output)
        .with_context(|| format!("cannot resolve {}", args.output.display()))?;
    if out.join(MANIFEST_NAME).exists() && !args.force {
        bail!(
            "{} already holds a dataset ({MANIFEST_NAME})\nhint: --force replaces its manifest, or choose another directory",
            args.output.display()
        );
    }
    let plan = plan(&paths, &out, args.absolute)?;
    if args.wids_json.is_some()
        && let Some(p) = plan.iter().find(|p| !is_plain_name(&p.given))
    {
        // Checked again after the scan, by content; this catches the obvious case early.
        bail!(
            "--wids-json: {} is not a plain .tar, and wids reads only plain tars",
            p.given.display()
        );
    }
    if args.allow_split
        && let Some(p) = plan.iter().find(|p| !is_plain_name(&p.given))
    {
        // Checked again by the scan, by content; this catches the obvious case early.
        bail!(
            "--allow-split: {} is not a plain .tar; a .tar.zst stores each sample as one zstd frame, so the \
             members of a split sample cannot be regrouped\n\
             hint: index it without --allow-split (or with --rename-split), or decompress it and index the plain .tar",
            p.given.display()
        );
    }

    let opts = ScanOptions {
        checksums: args.checksum,
        split: if args.rename_split {
            SplitPolicy::Rename
        } else if args.allow_split {
            SplitPolicy::Regroup
        } else {
            SplitPolicy::Refuse
        },
    };
    let quiet = args.quiet || args.json;
    let bar = progress::bar(plan.len() as u64, "shards", quiet);
    let created: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.jobs.unwrap_or(0))
        .build()
        .context("cannot start the worker threads")?;
    let result: anyhow::Result<Vec<(ShardEntry, ScannedShard)>> = pool.install(|| {
        plan.par_iter()
            .map(|p| {
                let scanned = scan_shard(&p.given, &opts).map_err(|e| with_hint(e.to_string()))?;
                let dest = out.join(&p.index);
                let new = !dest.exists();
                let sum = scanned.write_index(&dest)?;
                if new {
                    created
                        .lock()
                        .map_err(|_| anyhow!("a worker thread panicked"))?
                        .push(dest);
                }
                bar.inc(1);
                let entry = scanned.manifest_entry(p.file.clone(), p.index.clone(), sum);
                Ok((entry, scanned))
            })
            .collect()
    });
    bar.finish_and_clear();
    let done = match result.and_then(|done| {
        if let Some(wids) = &args.wids_json {
            write_wids(wids, &plan, &done, args.absolute)?;
        }
        let created_by = CreatedBy {
            tool: "bale".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            command: "index".into(),
            options: serde_json::json!({
                "checksum": args.checksum,
                "absolute": args.absolute,
                "rename_split": args.rename_split,
                "allow_split": args.allow_split,
            }),
        };
        let entries = done.iter().map(|(e, _)| e.clone()).collect();
        Manifest::new(entries, None, created_by).write(&out)?;
        Ok(done)
    }) {
        Ok(done) => done,
        Err(e) => {
            for p in created.into_inner().unwrap_or_default() {
                let _ = fs::remove_file(p);
            }
            if !existed {
                // Only if it is empty: the directory this run created.
                let _ = fs::remove_dir(&out);
            }
            return Err(anyhow!(
                "{e:#}\nno manifest was written, and the indexes this run created were removed"
            ));
        }
    };

    let seconds = started.elapsed().as_secs_f64();
    let summary = Summary {
        output: args.output.display().to_string(),
        samples: done.iter().map(|(e, _)| e.samples).sum(),
        members: done.iter().map(|(e, _)| e.members).sum(),
        bytes: done.iter().map(|(e, _)| e.bytes).sum(),
        bytes_read: done.iter().map(|(_, s)| s.stats.bytes_read).sum(),
        checksums: args.checksum,
        wids_json: args.wids_json.as_ref().map(|p| p.display().to_string()),
        seconds,
        shards: done
            .iter()
            .map(|(e, s)| ShardSummary {
                file: e.file.clone(),
                index: e.index.clone(),
                samples: e.samples,
                members: e.members,
                bytes: e.bytes,
                compression: e.compression,
                skipped_not_files: s.stats.skipped_not_files,
                skipped_no_extension: s.stats.skipped_no_extension,
                stripped_dot_slash: s.stats.stripped_dot_slash,
                renamed: s.stats.renamed.len(),
                regrouped: s.stats.regrouped.len(),
                scattered: s.is_scattered(),
                long_names: s.stats.long_names,
            })
            .collect(),
    };
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&summary)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.quiet {
        return Ok(ExitCode::SUCCESS);
    }
    let mut err = std::io::stderr().lock();
    for note in notes(&summary, &done, args.wids_json.is_some()) {
        writeln!(err, "{note}")?;
    }
    let rate = summary.bytes as f64 / seconds.max(1e-9);
    writeln!(
        stdout,
        "indexed {} shards into {}: {} samples, {} members, {} of tars in {seconds:.2} s ({}/s, {})",
        summary.shards.len(),
        summary.output,
        summary.samples,
        summary.members,
        human_bytes(summary.bytes),
        human_bytes(rate as u64),
        if args.checksum {
            "every byte read and checksummed"
        } else {
            "headers only"
        },
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Adds a `hint:` line to the scan errors that have an obvious way out.
fn with_hint(msg: String) -> anyhow::Error {
    let hint = if msg.contains("are not contiguous") {
        "\nhint: --allow-split regroups the key's members into one sample (plain tars; that shard's index \
         is then read member by member), --rename-split indexes each later run as a sample of its own (KEY~2, ...)"
    } else {
        ""
    };
    anyhow!("{msg}{hint}")
}

/// The notes printed on stderr after a successful run.
fn notes(s: &Summary, done: &[(ShardEntry, ScannedShard)], wids: bool) -> Vec<String> {
    let mut out = Vec::new();
    let sum = |f: fn(&ShardSummary) -> u64| s.shards.iter().map(f).sum::<u64>();
    let (dirs, noext, dots) = (
        sum(|x| x.skipped_not_files),
        sum(|x| x.skipped_no_extension),
        sum(|x| x.stripped_dot_slash),
    );
    if dirs + noext > 0 {
        out.push(format!(
            "note: skipped {dirs} directories, links and other non-file entries and {noext} files without an \
             extension (they belong to no sample, as in WebDataset)"
        ));
    }
    if dots > 0 {
        out.push(format!(
            "note: removed a leading \"./\" from {dots} member names (the keys are the names without it)"
        ));
    }
    for (e, sc) in done {
        if let Some(r) = sc.stats.renamed.first() {
            out.push(format!(
                "note: {}: {} samples renamed because their key reappeared after other samples (first: {:?} at \
                 offset {} is now {:?})",
                e.file,
                sc.stats.renamed.len(),
                r.tar_key,
                r.tar_offset,
                r.key
            ));
        }
        if let Some(r) = sc.stats.regrouped.first() {
            out.push(format!(
                "note: {}: {} later runs of keys regrouped into their first run's sample (first: {:?} at offset {} \
                 joined to offset {}); its index is scattered (layout 1.1), so every sample of this shard is read \
                 member by member",
                e.file,
                sc.stats.regrouped.len(),
                r.key,
                r.tar_offset,
                r.first_offset
            ));
        }
        if wids && sc.stats.long_names > 0 {
            out.push(format!(
                "warning: {}: {} member names do not fit the 100-byte tar name field; wids reads only that \
                 field and will misread them (bale reads them correctly)",
                e.file, sc.stats.long_names
            ));
        }
    }
    if !s.checksums {
        out.push(
            "note: no checksums were recorded (headers only); `bale verify` checks structure but not member \
             bytes; index with --checksum to record them"
                .into(),
        );
    }
    out
}

fn is_plain_name(p: &Path) -> bool {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    !(name.ends_with(".zst") || name.ends_with(".gz") || name.ends_with(".tgz"))
}

/// Works out index names and manifest paths; refuses a file given twice and
/// two files whose indexes would have the same name.
fn plan(paths: &[PathBuf], out: &Path, absolute: bool) -> anyhow::Result<Vec<Planned>> {
    let mut by_canonical: HashMap<PathBuf, &Path> = HashMap::new();
    let mut by_index: HashMap<String, &Path> = HashMap::new();
    let mut plan = Vec::with_capacity(paths.len());
    for given in paths {
        let canonical =
            fs::canonicalize(given).with_context(|| format!("cannot open {}", given.display()))?;
        if !canonical.is_file() {
            bail!("{} is not a regular file", given.display());
        }
        if let Some(first) = by_canonical.insert(canonical.clone(), given) {
            bail!(
                "{} is given twice (also as {}); each shard can be in a dataset once",
                given.display(),
                first.display()
            );
        }
        let name = canonical
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| anyhow!("{}: the file name is not UTF-8", given.display()))?;
        let index = index_file_name(name);
        if let Some(first) = by_index.insert(index.clone(), given) {
            bail!(
                "{} and {} would both get the index {}; index them into different directories",
                first.display(),
                given.display(),
                out.join(&index).display()
            );
        }
        let recorded = if absolute {
            canonical.clone()
        } else {
            relative(&canonical, out)
        };
        let file = recorded
            .to_str()
            .ok_or_else(|| anyhow!("{}: the path is not UTF-8", given.display()))?
            .to_owned();
        plan.push(Planned {
            given: given.clone(),
            canonical,
            index,
            file,
        });
    }
    Ok(plan)
}

/// `target` relative to the directory `base` (both absolute and canonical).
fn relative(target: &Path, base: &Path) -> PathBuf {
    let t: Vec<Component<'_>> = target.components().collect();
    let b: Vec<Component<'_>> = base.components().collect();
    let common = t.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c.as_os_str());
    }
    out
}

/// Writes the wids shard index (`wids-shard-index-v1`): the shards in dataset
/// order with their sample counts and sizes, URLs relative to the JSON file's
/// directory (as wids resolves them) or absolute.
fn write_wids(
    dest: &Path,
    plan: &[Planned],
    done: &[(ShardEntry, ScannedShard)],
    absolute: bool,
) -> anyhow::Result<()> {
    if let Some((e, _)) = done
        .iter()
        .find(|(e, _)| e.compression != Compression::None)
    {
        bail!(
            "--wids-json: {} is a .tar.zst, and wids reads only plain tars",
            e.file
        );
    }
    if let Some((e, s)) = done.iter().find(|(_, s)| s.is_scattered()) {
        let r = &s.stats.regrouped[0];
        bail!(
            "--wids-json: {} has samples regrouped by --allow-split (first: {:?} at offsets {} and {}); wids reads \
             a sample as one run of consecutive members, so it would not see the regrouped sample bale indexes\n\
             hint: drop --wids-json, or use --rename-split (the samples wids sees, later runs keyed KEY~2)",
            e.file,
            r.key,
            r.first_offset,
            r.tar_offset
        );
    }
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let base = fs::canonicalize(&parent)
        .with_context(|| format!("cannot resolve {}", parent.display()))?;
    let shardlist = plan
        .iter()
        .zip(done)
        .map(|(p, (e, _))| {
            let url = if absolute {
                p.canonical.clone()
            } else {
                relative(&p.canonical, &base)
            };
            let url = url
                .to_str()
                .ok_or_else(|| anyhow!("{}: the path is not UTF-8", p.given.display()))?;
            Ok(serde_json::json!({ "url": url, "nsamples": e.samples, "filesize": e.bytes }))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let name = base.join(dest.file_name().unwrap_or_default());
    let name = name.file_stem().and_then(|s| s.to_str()).unwrap_or("bale");
    let doc = serde_json::json!({
        "__kind__": "wids-shard-index-v1",
        "wids_version": 1,
        "name": name,
        "shardlist": shardlist,
    });
    let mut bytes = serde_json::to_vec_pretty(&doc)?;
    bytes.push(b'\n');
    bale_format::atomic::write_atomic(dest, &bytes)?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Patterns.

/// Expands every argument: brace patterns first, then globs; plain paths stay.
fn expand_all(args: &[String]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for arg in args {
        let names = expand_braces(arg)?;
        let braces = names.len() > 1 || names.first().is_some_and(|n| n != arg);
        for name in names {
            if has_glob_meta(&name) {
                let matches = glob(&name)?;
                if matches.is_empty() {
                    bail!("{name:?} matches no file");
                }
                out.extend(matches);
            } else {
                let p = PathBuf::from(&name);
                if !p.exists() {
                    if braces {
                        bail!("{name} (from the pattern {arg:?}) does not exist");
                    }
                    bail!("{name} does not exist");
                }
                out.push(p);
            }
        }
    }
    Ok(out)
}

fn has_glob_meta(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Expands shell-style braces: `{a,b}` lists and `{000..099}` (or `{0..99..2}`)
/// numeric ranges, nested or several in one pattern, in order. A range
/// endpoint with a leading zero pads every number to the wider endpoint.
/// Braces that are neither (`{x}`, unmatched) stay as they are.
fn expand_braces(s: &str) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    expand_into(s, &mut out)?;
    Ok(out)
}

fn expand_into(s: &str, out: &mut Vec<String>) -> anyhow::Result<()> {
    let Some((open, close, options)) = first_group(s)? else {
        out.push(s.to_owned());
        return Ok(());
    };
    for opt in options {
        expand_into(&format!("{}{opt}{}", &s[..open], &s[close + 1..]), out)?;
        if out.len() > MAX_EXPANSION {
            bail!("the pattern {s:?} expands to more than {MAX_EXPANSION} names");
        }
    }
    Ok(())
}

/// The first brace group that expands: its `{` and `}` byte positions and options.
fn first_group(s: &str) -> anyhow::Result<Option<(usize, usize, Vec<String>)>> {
    let b = s.as_bytes();
    for open in (0..b.len()).filter(|&i| b[i] == b'{') {
        let mut depth = 0usize;
        let mut commas = Vec::new();
        let mut close = None;
        for (i, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(i);
                        break;
                    }
                }
                b',' if depth == 1 => commas.push(i),
                _ => {}
            }
        }
        let Some(close) = close else { continue };
        if !commas.is_empty() {
            let mut opts = Vec::new();
            let mut start = open + 1;
            for c in commas.into_iter().chain([close]) {
                opts.push(s[start..c].to_owned());
                start = c + 1;
            }
            return Ok(Some((open, close, opts)));
        }
        if let Some(range) = numeric_range(&s[open + 1..close])? {
            return Ok(Some((open, close, range)));
        }
    }
    Ok(None)
}

fn numeric_range(inner: &str) -> anyhow::Result<Option<Vec<String>>> {
    let parts: Vec<&str> = inner.split("..").collect();
    if !(2..=3).contains(&parts.len()) {
        return Ok(None);
    }
    let is_int = |p: &str| {
        let d = p.strip_prefix('-').unwrap_or(p);
        !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit())
    };
    if !parts.iter().all(|p| is_int(p)) {
        return Ok(None);
    }
    let num = |p: &str| {
        p.parse::<i64>()
            .map_err(|_| anyhow!("{p:?} in {{{inner}}} is too large"))
    };
    let (a, b) = (num(parts[0])?, num(parts[1])?);
    let step = match parts.get(2) {
        Some(s) => num(s)?.unsigned_abs().max(1),
        None => 1,
    };
    let padded = |p: &str| {
        let d = p.strip_prefix('-').unwrap_or(p);
        d.len() > 1 && d.starts_with('0')
    };
    let width = if padded(parts[0]) || padded(parts[1]) {
        parts[0].len().max(parts[1].len())
    } else {
        0
    };
    let count = a.abs_diff(b) / step + 1;
    if count > MAX_EXPANSION as u64 {
        bail!("the range {{{inner}}} has more than {MAX_EXPANSION} numbers");
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut v = a;
    for _ in 0..count {
        out.push(if v < 0 {
            format!("-{:0w$}", v.unsigned_abs(), w = width.saturating_sub(1))
        } else {
            format!("{v:0width$}")
        });
        v = if a <= b {
            v.saturating_add(step as i64)
        } else {
            v.saturating_sub(step as i64)
        };
    }
    Ok(Some(out))
}

/// The files matching a glob (`*`, `?`, `[...]` within a path component; `**`
/// for any number of directories), sorted. As in a shell, `*` and `?` do not
/// match a leading dot.
fn glob(pattern: &str) -> anyhow::Result<Vec<PathBuf>> {
    let absolute = pattern.starts_with('/');
    let comps: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    let literal = comps.iter().take_while(|c| !has_glob_meta(c)).count();
    let mut base = PathBuf::from(if absolute { "/" } else { "" });
    for c in &comps[..literal] {
        base.push(c);
    }
    let mut out = Vec::new();
    glob_walk(&base, &comps[literal..], &mut out)?;
    out.sort();
    out.dedup();
    Ok(out)
}

fn glob_walk(dir: &Path, comps: &[&str], out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let Some((&c, rest)) = comps.split_first() else {
        return Ok(());
    };
    let read_dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let mut entries: Vec<(String, PathBuf, bool, bool)> = Vec::new();
    let rd = match fs::read_dir(read_dir) {
        Ok(rd) => rd,
        // A directory that is not there, or not a directory, matches nothing.
        Err(_) => return Ok(()),
    };
    for e in rd {
        let e = e.with_context(|| format!("cannot list {}", read_dir.display()))?;
        let Some(name) = e.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let ty = e
            .file_type()
            .with_context(|| format!("cannot stat {}", e.path().display()))?;
        let path = dir.join(&name);
        // Follow symlinks for files and named directories, not for `**` recursion.
        let is_dir = path.is_dir();
        entries.push((name, path, is_dir, ty.is_dir()));
    }
    entries.sort();
    if c == "**" {
        glob_walk(dir, rest, out)?;
        for (name, path, _, real_dir) in &entries {
            if *real_dir && !name.starts_with('.') {
                glob_walk(path, comps, out)?;
            }
        }
        return Ok(());
    }
    for (name, path, is_dir, _) in entries {
        if !component_match(c.as_bytes(), name.as_bytes()) {
            continue;
        }
        if rest.is_empty() {
            if path.is_file() {
                out.push(path);
            }
        } else if is_dir {
            glob_walk(&path, rest, out)?;
        }
    }
    Ok(())
}

/// Matches one path component against a pattern component.
fn component_match(p: &[u8], name: &[u8]) -> bool {
    if name.first() == Some(&b'.') && p.first() != Some(&b'.') {
        return false;
    }
    wildcard(p, name)
}

fn wildcard(p: &[u8], s: &[u8]) -> bool {
    // Iterative matching with backtracking to the last `*`.
    let (mut pi, mut si) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(&p[pi..], s[si])
                        && matched
                    {
                        pi += next;
                        si += 1;
                        continue;
                    }
                }
                c if c == s[si] => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, ss)) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Matches a `[...]` class at the start of `p` against `c`: whether it
/// matched and the class's length. `None` when the class is not closed.
fn class(p: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(p.get(i), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == b']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
            matched |= p[i] <= c && c <= p[i + 2];
            i += 3;
        } else {
            matched |= p[i] == c;
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_expand_like_a_shell() {
        let cases: &[(&str, &[&str])] = &[
            ("a.tar", &["a.tar"]),
            (
                "s-{0..3}.tar",
                &["s-0.tar", "s-1.tar", "s-2.tar", "s-3.tar"],
            ),
            (
                "s-{000008..000011}.tar",
                &[
                    "s-000008.tar",
                    "s-000009.tar",
                    "s-000010.tar",
                    "s-000011.tar",
                ],
            ),
            (
                "{train,val}-{0..1}",
                &["train-0", "train-1", "val-0", "val-1"],
            ),
            ("{a,b{1,2}}c", &["ac", "b1c", "b2c"]),
            ("x{3..1}", &["x3", "x2", "x1"]),
            ("x{0..6..3}", &["x0", "x3", "x6"]),
            ("x{-1..1}", &["x-1", "x0", "x1"]),
            ("x{a}y", &["x{a}y"]),
            ("x{1..a}", &["x{1..a}"]),
            ("{unclosed,x", &["{unclosed,x"]),
            ("{a{b,c}", &["{ab", "{ac"]),
            ("e{,s}", &["e", "es"]),
        ];
        for (pattern, want) in cases {
            assert_eq!(expand_braces(pattern).unwrap(), *want, "{pattern}");
        }
        assert!(expand_braces("{0..99999999}").is_err());
    }

    #[test]
    fn wildcards_match_like_a_shell() {
        let yes = [
            ("*.tar", "a.tar"),
            ("train-*.tar", "train-000001.tar"),
            ("?.tar", "a.tar"),
            ("[ab].tar", "b.tar"),
            ("[a-c]x", "bx"),
            ("[!a]x", "bx"),
            ("*", "x"),
            ("a*b*c", "aXXbYYc"),
            (".*", ".hidden"),
        ];
        let no = [
            ("*.tar", "a.tar.zst"),
            ("?.tar", "ab.tar"),
            ("[ab].tar", "c.tar"),
            ("[!a]x", "ax"),
            ("*", ".hidden"),
            ("a*b*c", "aXXbYY"),
            ("[ab", "a"),
        ];
        for (p, s) in yes {
            assert!(
                component_match(p.as_bytes(), s.as_bytes()),
                "{p} should match {s}"
            );
        }
        for (p, s) in no {
            assert!(
                !component_match(p.as_bytes(), s.as_bytes()),
                "{p} should not match {s}"
            );
        }
    }

    #[test]
    fn globs_find_files_sorted_and_patterns_expand() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        for f in [
            "s/b.tar",
            "s/a.tar",
            "s/c.idx",
            "s/.h.tar",
            "s/sub/d.tar",
            "s/sub/deeper/e.tar",
        ] {
            let p = root.join(f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, b"").unwrap();
        }
        let r = root.to_str().unwrap();
        let names = |pattern: &str| -> Vec<String> {
            expand_all(&[pattern.to_owned()])
                .unwrap()
                .iter()
                .map(|p| p.strip_prefix(root).unwrap().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(names(&format!("{r}/s/*.tar")), ["s/a.tar", "s/b.tar"]);
        assert_eq!(
            names(&format!("{r}/s/**/*.tar")),
            ["s/a.tar", "s/b.tar", "s/sub/d.tar", "s/sub/deeper/e.tar"]
        );
        assert_eq!(names(&format!("{r}/*/*/d.tar")), ["s/sub/d.tar"]);
        assert_eq!(names(&format!("{r}/s/{{b,a}}.tar")), ["s/b.tar", "s/a.tar"]);
        assert_eq!(
            names(&format!("{r}/s/{{a,sub/*}}.tar")),
            ["s/a.tar", "s/sub/d.tar"]
        );
        let err = expand_all(&[format!("{r}/s/*.zst")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("matches no file"), "{err}");
        let err = expand_all(&[format!("{r}/s/{{a,x}}.tar")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("x.tar (from the pattern"), "{err}");
    }

    #[test]
    fn relative_paths_climb_out_of_the_dataset_dir() {
        let rel = |t: &str, b: &str| {
            relative(Path::new(t), Path::new(b))
                .to_string_lossy()
                .into_owned()
        };
        assert_eq!(rel("/d/shards/a.tar", "/d/ds"), "../shards/a.tar");
        assert_eq!(rel("/d/ds/a.tar", "/d/ds"), "a.tar");
        assert_eq!(rel("/x/a.tar", "/d/ds/deep"), "../../../x/a.tar");
        assert_eq!(
            Manifest::resolve(Path::new("/d/ds"), &rel("/d/shards/a.tar", "/d/ds")),
            Path::new("/d/ds/../shards/a.tar")
        );
    }
}
