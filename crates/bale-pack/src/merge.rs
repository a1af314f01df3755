//! `bale merge`: joins the outputs of `bale pack --part I/N` into one dataset.
//!
//! The shards are renamed into the output's `shard-NNNNNN` sequence (part 0's
//! first, in order), so no shard byte is copied; across filesystems they are
//! copied only when asked. One manifest is written, last.
//!
//! Before the first file moves, a journal of the moves
//! ([`JOURNAL_NAME`]) is written into the output and synced; it goes once
//! the merge is complete or undone. A merge that was killed (SIGKILL, a
//! lost node) leaves it, and the next `merge` into that output reads it
//! first: without a manifest in the output it moves every file back to its
//! part (or removes the copy), with one it finishes the merge. Any other
//! command refuses to write into an output holding a journal
//! ([`crate::output::Output`]). A merge that is cancelled (Ctrl-C, SIGTERM,
//! SIGHUP) stops between two files and undoes what it moved.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use bale_format::atomic::TEMP_PREFIX;
use bale_format::parse_hex64;
use bale_format::{CreatedBy, FormatError, Manifest, ShardIndex, index_file_name, shard_file_name};
use serde::{Deserialize, Serialize};

use crate::error::{PackError, Result};
use crate::options::ShapingOptions;
use crate::output::{Inputs, JOURNAL_NAME, Output};

/// Options of [`merge`].
#[derive(Debug, Clone, Copy, Default)]
pub struct MergeOptions {
    /// Copy shards that cannot be renamed because they are on another
    /// filesystem (default: `false`: such a merge is refused).
    pub copy: bool,
    /// Write into a non-empty output directory (default: `false`).
    pub force: bool,
    /// Merge parts whose samples share keys (default: `false`: refused,
    /// naming the key and both shards); recorded in the manifest, so that
    /// `bale verify` reports them as warnings.
    pub allow_duplicate_keys: bool,
}

/// What a merge did.
#[derive(Debug, Clone, Serialize)]
pub struct MergeSummary {
    /// The merged dataset directory.
    pub output: String,
    /// Parts joined.
    pub parts: u32,
    /// Shards in the merged dataset.
    pub shards: u64,
    /// Samples in the merged dataset.
    pub samples: u64,
    /// Bytes of shard files.
    pub bytes: u64,
    /// Files (shards and indexes) renamed into place.
    pub renamed: u64,
    /// Files copied (across filesystems, with `copy`).
    pub copied: u64,
    /// Input files the parts skipped (sum of their manifests' `skipped`).
    pub skipped: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Files an earlier merge into this output left moved when it was
    /// killed, and which this one moved back to their parts first (or
    /// found merged, when that merge had written its manifest).
    pub recovered: u64,
}

/// What [`JOURNAL_NAME`] holds: every move the merge is about to make.
#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    /// The part directories, absolute, as the bytes of their paths in hex
    /// (a path need not be UTF-8).
    parts: Vec<String>,
    /// `(part, file in the part, file in the output)` per move.
    moves: Vec<(usize, String, String)>,
}

fn hex_path(p: &Path) -> String {
    p.as_os_str()
        .as_encoded_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn unhex_path(s: &str) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let bytes = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    Some(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
}

/// Whether `f` names a file directly in its directory: what a part's
/// shards and the merged ones are, and all a journal may name.
fn plain_name(f: &str) -> bool {
    !f.is_empty() && !f.contains('/') && f != "." && f != ".."
}

/// Writes the journal of `plan` into `output`, synced (file and directory).
/// Refuses, before anything moves, a part whose manifest names a file
/// outside the part's directory (`bale pack --part` writes none).
fn write_journal(output: &Path, ins: &[PartIn], plan: &MergePlan) -> Result<()> {
    if let Some(f) = plan
        .files
        .iter()
        .find(|f| !plain_name(&f.from) || !plain_name(&f.to))
    {
        return Err(merr(
            &ins[f.part].dir,
            format!(
                "its manifest names {:?}, not a file in the part's directory; merge moves only a part's own files",
                f.from
            ),
        ));
    }
    let parts = ins
        .iter()
        .map(|p| {
            fs::canonicalize(&p.dir)
                .map(|d| hex_path(&d))
                .map_err(|e| PackError::io(&p.dir, e))
        })
        .collect::<Result<Vec<_>>>()?;
    let journal = Journal {
        parts,
        moves: plan
            .files
            .iter()
            .map(|f| (f.part, f.from.clone(), f.to.clone()))
            .collect(),
    };
    let path = output.join(JOURNAL_NAME);
    let bytes =
        serde_json::to_vec(&journal).map_err(|e| PackError::io(&path, io::Error::other(e)))?;
    let write = || -> io::Result<()> {
        let mut f = bale_format::files::create_file(&path, false).map_err(io::Error::other)?;
        io::Write::write_all(&mut f, &bytes)?;
        f.sync_all()?;
        fs::File::open(output)?.sync_all()
    };
    write().map_err(|e| PackError::io(&path, e))
}

/// Puts right what a killed merge into `output` left (its journal): every
/// file moves back to its part (a copy is removed), unless the output has
/// its manifest, when the merge is finished instead (the parts' manifests
/// removed). Returns the files put right; 0 when there is no journal.
fn recover(output: &Path) -> Result<u64> {
    let path = output.join(JOURNAL_NAME);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(PackError::io(&path, e)),
    };
    let _lock = bale_format::files::DirLock::try_lock(output)?;
    let bad = |what: &str| {
        merr(
            &path,
            format!(
                "{what}: this journal of an interrupted merge cannot be read; the files it \
                 lists are in {} and in the part directories; put them back by hand",
                output.display()
            ),
        )
    };
    let journal: Journal = serde_json::from_slice(&bytes).map_err(|_| bad("not JSON"))?;
    let parts = journal
        .parts
        .iter()
        .map(|h| unhex_path(h))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| bad("a part path is not hex"))?;
    let finished = Manifest::path_in(output).exists();
    let mut n = 0u64;
    for (part, from, to) in journal.moves.iter().rev() {
        // Only plain names inside their directories (a journal is bale's
        // own file, but a damaged one must not move files elsewhere).
        let Some(dir) = parts
            .get(*part)
            .filter(|_| plain_name(from) && plain_name(to))
        else {
            return Err(bad("a move names no part or a path"));
        };
        let (src, dst) = (dir.join(from), output.join(to));
        if finished {
            n += u64::from(dst.exists());
            continue;
        }
        match (src.exists(), dst.exists()) {
            // Moved: move it back.
            (false, true) => {
                bale_format::files::rename_noreplace(&dst, &src)
                    .map_err(|e| PackError::io(&dst, e))?;
                n += 1;
            }
            // Copied (the part keeps its file): remove the copy.
            (true, true) => {
                fs::remove_file(&dst).map_err(|e| PackError::io(&dst, e))?;
                n += 1;
            }
            _ => {}
        }
    }
    if finished {
        for dir in &parts {
            let m = Manifest::path_in(dir);
            let gone = Manifest::read(dir).is_ok_and(|pm| {
                pm.shards
                    .iter()
                    .all(|s| !Manifest::resolve(dir, &s.file).exists())
            });
            if gone {
                let _ = fs::remove_file(&m);
                let _ = fs::remove_dir(dir);
            }
        }
    }
    for dir in &parts {
        let _ = fs::File::open(dir).and_then(|d| d.sync_all());
    }
    // What the killed merge was writing when it died (its manifest, a
    // copy): bale's temporary files, never a dataset's.
    crate::output::remove_temps(output, None)?;
    fs::remove_file(&path).map_err(|e| PackError::io(&path, e))?;
    let _ = fs::File::open(output).and_then(|d| d.sync_all());
    Ok(n)
}

fn merr(path: &Path, what: impl Into<String>) -> PackError {
    PackError::Merge {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

struct PartIn {
    dir: PathBuf,
    manifest: Manifest,
    options: ShapingOptions,
}

/// Files moved so far; moved back (or removed, when copied) unless
/// committed, and then the journal (when one was written) removed.
#[derive(Default)]
struct Moves {
    done: Vec<(PathBuf, PathBuf, bool)>,
    committed: bool,
    journal: Option<PathBuf>,
}

impl Drop for Moves {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        let mut undone = true;
        for (src, dst, copied) in self.done.iter().rev() {
            let r = if *copied {
                fs::remove_file(dst)
            } else {
                fs::rename(dst, src)
            };
            undone &= r.is_ok();
        }
        // A file that could not be put back keeps the journal: the next
        // merge into this output tries again.
        if let Some(j) = self.journal.as_ref().filter(|_| undone) {
            let _ = fs::remove_file(j);
        }
    }
}

fn move_file(src: &Path, dst: &Path, copy: bool, moves: &mut Moves) -> Result<()> {
    match bale_format::files::rename_noreplace(src, dst) {
        Ok(()) => {
            moves
                .done
                .push((src.to_path_buf(), dst.to_path_buf(), false));
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
            if !copy {
                return Err(merr(
                    src,
                    format!(
                        "it is on another filesystem than {}; pass --copy to copy the shards",
                        dst.parent().unwrap_or(dst).display()
                    ),
                ));
            }
            let name = dst
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let tmp = dst.with_file_name(format!("{TEMP_PREFIX}{}-{name}", std::process::id()));
            let r = fs::copy(src, &tmp)
                .and_then(|_| fs::File::open(&tmp)?.sync_all())
                .and_then(|()| bale_format::files::rename_noreplace(&tmp, dst));
            if let Err(e) = r {
                let _ = fs::remove_file(&tmp);
                return Err(PackError::io(dst, e));
            }
            moves
                .done
                .push((src.to_path_buf(), dst.to_path_buf(), true));
            Ok(())
        }
        Err(e) => Err(PackError::io(src, e)),
    }
}

fn read_part(dir: &Path) -> Result<PartIn> {
    let manifest = match Manifest::read(dir) {
        Ok(m) => m,
        Err(FormatError::Incomplete { .. }) => {
            return Err(merr(
                dir,
                "it has no bale.json: the part did not finish (or was already merged)",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    part_in(dir.to_path_buf(), manifest)
}

fn part_in(dir: PathBuf, manifest: Manifest) -> Result<PartIn> {
    if manifest.created_by.command != "pack" {
        return Err(merr(
            &dir,
            format!(
                "it was written by `bale {}`, not `bale pack --part`",
                manifest.created_by.command
            ),
        ));
    }
    let options: ShapingOptions = serde_json::from_value(manifest.created_by.options.clone())
        .map_err(|e| {
            merr(
                &dir,
                format!("its manifest's created_by.options are not bale pack's: {e}"),
            )
        })?;
    if options.part.is_none() {
        return Err(merr(&dir, "it was not packed with --part I/N"));
    }
    Ok(PartIn {
        dir,
        manifest,
        options,
    })
}

/// Refuses parts cut from different listings: the tree changed between
/// their runs (files added, removed or renamed), so their slices of the
/// planned order overlap or leave gaps, and the merge would repeat samples
/// or lose them. Parts of older versions, which record no listing, are
/// merged as before only when none of them records one.
fn check_listings(ins: &[PartIn]) -> Result<()> {
    let first = &ins[0];
    for p in &ins[1..] {
        let (a, b) = (&first.options.listing, &p.options.listing);
        if a == b {
            continue;
        }
        let what = |l: &Option<crate::options::Listing>| match l {
            Some(l) => format!("{} samples (listing {})", l.samples, l.xxh3),
            None => "no listing (packed by an older bale)".to_owned(),
        };
        return Err(merr(
            &p.dir,
            format!(
                "it was cut from another listing than {}: {} against {}. The input changed \
                 between the parts' runs, so the parts would repeat or miss samples; pack \
                 every part again from the same input",
                first.dir.display(),
                what(b),
                what(a)
            ),
        ));
    }
    Ok(())
}

fn differing_fields(a: &ShapingOptions, b: &ShapingOptions) -> Vec<String> {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(a), serde_json::to_value(b))
    else {
        return vec!["options".into()];
    };
    a.iter()
        .filter(|(k, v)| k.as_str() != "part" && b.get(k.as_str()) != Some(v))
        .map(|(k, v)| {
            format!(
                "{k} ({v} vs {})",
                b.get(k.as_str()).unwrap_or(&serde_json::Value::Null)
            )
        })
        .collect()
}

fn check_files(part: &PartIn) -> Result<()> {
    for s in &part.manifest.shards {
        let shard = Manifest::resolve(&part.dir, &s.file);
        let meta = fs::metadata(&shard).map_err(|e| PackError::io(&shard, e))?;
        if !meta.is_file() {
            return Err(merr(
                &part.dir,
                format!(
                    "{} is {}, not a regular file",
                    bale_format::shown(&shard),
                    bale_format::files::kind_of(&meta)
                ),
            ));
        }
        let len = meta.len();
        if len != s.bytes {
            return Err(merr(
                &part.dir,
                format!(
                    "{} is {len} bytes, its manifest says {}",
                    shard.display(),
                    s.bytes
                ),
            ));
        }
        let index_path = Manifest::resolve(&part.dir, &s.index);
        let index = ShardIndex::open(&index_path)?;
        if Some(index.checksum()) != parse_hex64(&s.index_xxh3) {
            return Err(merr(
                &part.dir,
                format!(
                    "{} does not match the checksum in its manifest",
                    index_path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses a merge whose parts share a key, unless `allow`, naming the key
/// and the two shards (`shard_name(k)` names shard `k` of the merged
/// manifest, in part order, whose index is `indexes[k]`): parts packed
/// from different inputs with the same options may repeat samples, and a
/// lookup by key could not tell them apart. One merged pass over the
/// indexes' hash-sorted lookup tables ([`bale_format::duplicate_keys`]).
/// When allowed, the merged manifest records it, as `bale index` does.
pub(crate) fn check_shared_keys(
    plan: &mut MergePlan,
    indexes: &[&ShardIndex],
    shard_name: impl Fn(usize) -> String,
    allow: bool,
) -> Result<()> {
    if allow {
        if let serde_json::Value::Object(map) = &mut plan.manifest.created_by.options {
            map.insert("allow_duplicate_keys".into(), true.into());
        }
        return Ok(());
    }
    let Some(d) = bale_format::duplicate_keys(indexes, 1).into_iter().next() else {
        return Ok(());
    };
    let part_of = |k: usize| plan.files.get(2 * k).map_or(0, |f| f.part);
    Err(merr(
        &plan.parts[part_of(d.second.0)],
        format!(
            "sample {} of {} has the key {:?}, which sample {} of {} has too: keys must be \
             unique across the parts (a lookup by key could not tell them apart; were the \
             parts packed from different inputs?); pass --allow-duplicate-keys to merge them \
             anyway",
            d.second.1,
            shard_name(d.second.0),
            d.key,
            d.first.1,
            shard_name(d.first.0)
        ),
    ))
}

/// One file of a part and its name in the merged dataset.
#[derive(Debug, Clone)]
pub struct MergeFile {
    /// Which part (an index into [`MergePlan::parts`]).
    pub part: usize,
    /// Its name in the part (relative to the part's directory or prefix).
    pub from: String,
    /// Its name in the merged dataset.
    pub to: String,
}

/// A merge worked out from the parts' manifests: the files to move, copy or
/// reference, and the merged manifest to write last.
#[derive(Debug, Clone)]
pub struct MergePlan {
    /// The parts, in part order (directories or URLs).
    pub parts: Vec<PathBuf>,
    /// Each shard and index of each part, with its new name.
    pub files: Vec<MergeFile>,
    /// The merged dataset's manifest.
    pub manifest: Manifest,
    /// The number of parts.
    pub count: u32,
}

/// Checks the parts (given as their location, for messages, and their
/// manifest) and plans their merge: every part `0..N` exactly once, each
/// written by `bale pack --part`, all with the same shaping options and
/// classes. Does not look at the parts' files (see [`merge`], which does).
///
/// # Errors
/// [`PackError::Merge`] naming the part and the problem.
pub fn plan_merge(parts: Vec<(PathBuf, Manifest)>) -> Result<MergePlan> {
    let ins: Vec<PartIn> = parts
        .into_iter()
        .map(|(d, m)| part_in(d, m))
        .collect::<Result<_>>()?;
    let (ins, plan) = plan_parts(ins)?;
    drop(ins);
    Ok(plan)
}

fn plan_parts(mut ins: Vec<PartIn>) -> Result<(Vec<PartIn>, MergePlan)> {
    let first = ins
        .first()
        .map(|p| p.dir.clone())
        .ok_or_else(|| PackError::Option("no part directories to merge".into()))?;
    let first = &first;
    ins.sort_by_key(|p| p.options.part.map_or(0, |x| x.index));
    let count = ins[0].options.part.map_or(0, |p| p.count);
    for w in ins.windows(2) {
        let (a, b) = (w[0].options.part, w[1].options.part);
        if a == b {
            return Err(merr(
                &w[1].dir,
                format!(
                    "it is part {} like {}",
                    b.map(|p| p.to_string()).unwrap_or_default(),
                    w[0].dir.display()
                ),
            ));
        }
    }
    for p in &ins {
        let part = p.options.part.unwrap_or(crate::Part { index: 0, count: 0 });
        if part.count != count {
            return Err(merr(
                &p.dir,
                format!(
                    "it is part {part} but {} is one of {count} parts",
                    ins[0].dir.display()
                ),
            ));
        }
    }
    if ins.len() != count as usize {
        let have: Vec<u32> = ins
            .iter()
            .filter_map(|p| p.options.part.map(|x| x.index))
            .collect();
        let missing: Vec<String> = (0..count)
            .filter(|i| !have.contains(i))
            .map(|i| format!("{i}/{count}"))
            .collect();
        return Err(merr(
            first,
            format!("incomplete set of parts: missing {}", missing.join(", ")),
        ));
    }
    let base = ShapingOptions {
        part: None,
        listing: None,
        ..ins[0].options.clone()
    };
    for p in &ins[1..] {
        let o = ShapingOptions {
            part: None,
            listing: None,
            ..p.options.clone()
        };
        if o != base {
            return Err(merr(
                &p.dir,
                format!(
                    "it was packed with other options than {}: {}",
                    ins[0].dir.display(),
                    differing_fields(&o, &base).join(", ")
                ),
            ));
        }
        if p.manifest.labels != ins[0].manifest.labels {
            return Err(merr(
                &p.dir,
                format!(
                    "its class names differ from those of {}",
                    ins[0].dir.display()
                ),
            ));
        }
    }
    // After the options: parts of other options (another order) have
    // other listings too, and the options say why.
    check_listings(&ins)?;
    let compression = base.compression;
    let mut files = Vec::new();
    let mut entries = Vec::new();
    for (pi, p) in ins.iter().enumerate() {
        for s in &p.manifest.shards {
            let n = entries.len() as u64;
            let file = shard_file_name("shard", n, compression);
            let index = index_file_name(&file);
            files.push(MergeFile {
                part: pi,
                from: s.file.clone(),
                to: file.clone(),
            });
            files.push(MergeFile {
                part: pi,
                from: s.index.clone(),
                to: index.clone(),
            });
            let mut e = s.clone();
            e.file = file;
            e.index = index;
            entries.push(e);
        }
    }
    let mut options = serde_json::to_value(&base).unwrap_or_default();
    if let serde_json::Value::Object(map) = &mut options {
        map.insert("merged_parts".into(), count.into());
    }
    let created_by = CreatedBy {
        tool: "bale".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        command: "merge".into(),
        options,
    };
    let mut manifest = Manifest::new(entries, ins[0].manifest.labels.clone(), created_by);
    manifest.skipped = ins.iter().map(|p| p.manifest.skipped).sum();
    let plan = MergePlan {
        parts: ins.iter().map(|p| p.dir.clone()).collect(),
        files,
        manifest,
        count,
    };
    Ok((ins, plan))
}

/// Joins the part directories written by `bale pack --part I/N` into one
/// dataset in `output`.
///
/// Every part `0..N` must be given exactly once, each complete (with its
/// manifest, shard sizes and index checksums matching it), all packed with
/// the same shaping options. Shards are renamed (or copied, see
/// [`MergeOptions::copy`]) to `shard-NNNNNN` in part order, so the merged
/// dataset holds the samples of a single pack with the same options, in the
/// same order. The parts' manifests are then removed (copied parts are left
/// whole), and part directories left empty are removed.
///
/// # Errors
/// [`PackError::Merge`] naming the part and the problem; I/O errors. On
/// error, files already moved are moved back and no manifest is written.
pub fn merge(parts: &[PathBuf], output: &Path, opts: &MergeOptions) -> Result<MergeSummary> {
    merge_cancellable(parts, output, opts, &AtomicBool::new(false))
}

/// As [`merge`], stopping between two files once `cancel` is set: what was
/// moved is moved back ([`PackError::Cancelled`]). A merge into `output`
/// that was killed is put right first (see the module's documentation).
///
/// # Errors
/// As [`merge`]; [`PackError::Cancelled`].
pub fn merge_cancellable(
    parts: &[PathBuf],
    output: &Path,
    opts: &MergeOptions,
    cancel: &AtomicBool,
) -> Result<MergeSummary> {
    let start = Instant::now();
    let recovered = recover(output)?;
    if recovered > 0 && Manifest::path_in(output).exists() {
        // The killed merge had finished: this one has nothing left to do.
        let m = Manifest::read(output)?;
        return Ok(MergeSummary {
            output: output.to_string_lossy().into_owned(),
            parts: parts.len() as u32,
            shards: m.shards.len() as u64,
            samples: m.samples,
            bytes: m.bytes,
            renamed: 0,
            copied: 0,
            skipped: m.skipped,
            seconds: start.elapsed().as_secs_f64(),
            recovered,
        });
    }
    let ins: Vec<PartIn> = parts.iter().map(|p| read_part(p)).collect::<Result<_>>()?;
    let (ins, mut plan) = plan_parts(ins)?;
    let out_canon = fs::canonicalize(output).ok();
    for p in &ins {
        if out_canon.is_some() && fs::canonicalize(&p.dir).ok() == out_canon {
            return Err(PackError::Option(format!(
                "the output {} is one of the parts; merge into a new directory",
                output.display()
            )));
        }
        check_files(p)?;
    }
    // Keys the parts share (before the output is touched).
    let shards: Vec<(PathBuf, PathBuf)> = ins
        .iter()
        .flat_map(|p| {
            p.manifest.shards.iter().map(|s| {
                (
                    Manifest::resolve(&p.dir, &s.file),
                    Manifest::resolve(&p.dir, &s.index),
                )
            })
        })
        .collect();
    let opened = shards
        .iter()
        .map(|(_, index)| ShardIndex::open(index))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    check_shared_keys(
        &mut plan,
        &opened.iter().collect::<Vec<_>>(),
        |k| bale_format::shown(&shards[k].0).to_string(),
        opts.allow_duplicate_keys,
    )?;
    drop(opened);

    let mut out = Output::open(output, opts.force)?;
    // The parts lose their files: no other bale command may write them meanwhile.
    let _part_locks = ins
        .iter()
        .map(|p| bale_format::files::DirLock::try_lock(&p.dir))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mut inputs = Inputs::default();
    for p in &ins {
        inputs.add(&Manifest::path_in(&p.dir));
        for s in &p.manifest.shards {
            inputs.add(&Manifest::resolve(&p.dir, &s.file));
            inputs.add(&Manifest::resolve(&p.dir, &s.index));
        }
    }
    out.clear(&inputs)?;
    let mut moves = Moves::default();
    write_journal(output, &ins, &plan)?;
    moves.journal = Some(output.join(JOURNAL_NAME));
    let mut part_copied = vec![false; ins.len()];
    for f in &plan.files {
        if cancel.load(Ordering::SeqCst) {
            return Err(PackError::Cancelled);
        }
        let before = moves.done.len();
        move_file(
            &Manifest::resolve(&ins[f.part].dir, &f.from),
            &output.join(&f.to),
            opts.copy,
            &mut moves,
        )?;
        part_copied[f.part] |= moves.done[before..].iter().any(|m| m.2);
    }
    let manifest = plan.manifest;
    let count = plan.count;
    manifest.write(output)?;
    moves.committed = true;
    out.commit();
    let copied = moves.done.iter().filter(|m| m.2).count() as u64;
    let renamed = moves.done.len() as u64 - copied;
    for (p, copied) in ins.iter().zip(part_copied) {
        if !copied {
            // The part's files are gone: its manifest would point at nothing.
            let _ = fs::remove_file(Manifest::path_in(&p.dir));
            let _ = fs::remove_dir(&p.dir);
        }
    }
    // The merge is whole: the journal goes last (a merge killed before
    // this finds the manifest and finishes).
    if let Some(j) = moves.journal.take() {
        let _ = fs::remove_file(&j);
        let _ = fs::File::open(output).and_then(|d| d.sync_all());
    }
    Ok(MergeSummary {
        output: output.to_string_lossy().into_owned(),
        parts: count,
        shards: manifest.shards.len() as u64,
        samples: manifest.samples,
        bytes: manifest.bytes,
        renamed,
        copied,
        skipped: manifest.skipped,
        seconds: start.elapsed().as_secs_f64(),
        recovered,
    })
}
