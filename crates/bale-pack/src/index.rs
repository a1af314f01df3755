//! `bale index`: adopts existing WebDataset tars in place. Each tar is
//! scanned with [`bale_format::scan`] (in parallel), its index written into
//! the dataset directory, then the manifest (shard paths relative to it, or
//! absolute) and, if asked, a `wids` shard index.
//!
//! The dataset directory may hold other files, the tars themselves among
//! them: only the names this run writes (`<tar>.idx`, `bale.json`, the wids
//! file) must be free, or, with `force`, are replaced, but never a file that
//! is one of the tars. The directory is locked for the run; on failure the
//! files this run wrote are removed and no manifest is left.
//!
//! With `append`, the run adds tars to the dataset `bale index` wrote
//! there (see [`crate::append`]): the tars it lists already are skipped,
//! the others indexed and listed after them in one new manifest. The
//! settings it recorded must be this run's, and no key of a new tar may be
//! in the dataset. An index of bale's at a new tar's index name that the
//! manifest does not list (a killed run's) is replaced.

use std::collections::HashMap;
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use bale_format::scan::{ScanOptions, ScannedShard, SplitPolicy, scan_shard};
use bale_format::{Compression, CreatedBy, MANIFEST_NAME, Manifest, ShardEntry, index_file_name};
use rayon::prelude::*;
use serde::Serialize;

use crate::append::Base;
use crate::error::{PackError, Result};
use crate::output::{Inputs, Output};

/// Options of [`index`].
#[derive(Debug, Clone, Default)]
pub struct IndexOptions {
    /// The tar files, in dataset order (see [`crate::expand_patterns`]).
    pub shards: Vec<PathBuf>,
    /// The dataset directory: indexes and `bale.json` go there (created if missing).
    pub output: PathBuf,
    /// Record absolute shard paths (default: relative to `output`).
    pub absolute: bool,
    /// Read every member and record checksums (default: headers only).
    pub checksum: bool,
    /// Also write a `wids` shard index to this file.
    pub wids_json: Option<PathBuf>,
    /// Keys that reappear after other samples (default: refuse the tar).
    pub split: SplitPolicy,
    /// Replace a manifest, index or wids file already there (never a tar).
    pub force: bool,
    /// Index tars whose samples share keys (default: refuse them; a key
    /// lookup of such a key is then refused as ambiguous).
    pub allow_duplicate_keys: bool,
    /// Shards scanned at once (0: one per core).
    pub jobs: usize,
    /// Add the tars to the dataset `bale index` wrote in `output` (none
    /// there: a fresh index); takes neither `force` nor `wids_json`.
    pub append: bool,
}

/// The settings of `created_by.options` an append must share, and their
/// names for a mismatch.
const SETTINGS: [(&str, &str); 5] = [
    ("checksum", "--checksum setting"),
    ("absolute", "--absolute setting"),
    ("rename_split", "--rename-split setting"),
    ("allow_split", "--allow-split setting"),
    ("allow_duplicate_keys", "--allow-duplicate-keys setting"),
];

/// Progress of [`index`]; every method has an empty default.
pub trait IndexProgress: Sync {
    /// The run starts: `shards` tars to scan.
    fn start(&self, _shards: u64) {}
    /// One more tar was scanned and its index written.
    fn shard_indexed(&self) {}
}

impl IndexProgress for crate::NoProgress {}

/// What one tar gave.
#[derive(Debug, Clone, Serialize)]
pub struct IndexedShard {
    /// The shard path the manifest records.
    pub file: String,
    /// Its index file name in the dataset directory.
    pub index: String,
    /// Samples indexed.
    pub samples: u64,
    /// Members indexed.
    pub members: u64,
    /// Bytes of the shard file.
    pub bytes: u64,
    /// Plain tar or `.tar.zst`.
    pub compression: Compression,
    /// Directories, links and other non-file entries skipped.
    pub skipped_not_files: u64,
    /// Files without an extension skipped.
    pub skipped_no_extension: u64,
    /// Member names whose leading `./` was removed.
    pub stripped_dot_slash: u64,
    /// Samples indexed under a new key (`SplitPolicy::Rename`).
    pub renamed: usize,
    /// Later runs of keys joined to their first run (`SplitPolicy::Regroup`).
    pub regrouped: usize,
    /// The index is scattered (layout 1.1): the shard has regrouped samples.
    pub scattered: bool,
    /// Member names longer than the 100-byte ustar name field.
    pub long_names: u64,
    /// The first renamed sample: its tar key, tar offset and new key.
    #[serde(skip)]
    pub first_renamed: Option<(String, u64, String)>,
    /// The first regrouped run: its key, its offset and the first run's offset.
    #[serde(skip)]
    pub first_regrouped: Option<(String, u64, u64)>,
}

/// What [`index`] did.
#[derive(Debug, Clone, Serialize)]
pub struct IndexSummary {
    /// The dataset directory, as given.
    pub output: String,
    /// Per tar, in dataset order.
    pub shards: Vec<IndexedShard>,
    /// Samples in the dataset.
    pub samples: u64,
    /// Members in the dataset.
    pub members: u64,
    /// Bytes of the tars.
    pub bytes: u64,
    /// Bytes read from the tars.
    pub bytes_read: u64,
    /// Whether checksums were recorded.
    pub checksums: bool,
    /// The wids shard index written, if any.
    pub wids_json: Option<String>,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// With `append`: tars given that the dataset listed already (skipped).
    pub already_listed: u64,
}

/// One tar to index.
#[derive(Debug)]
struct Planned {
    /// The path as given.
    given: PathBuf,
    /// Canonical absolute path.
    canonical: PathBuf,
    /// Index file name in the dataset directory.
    index: String,
    /// Path the manifest records.
    file: String,
}

/// Indexes the tars `opts.shards` into the dataset directory `opts.output`.
///
/// # Errors
/// A tar that cannot be read or indexed (naming it and the offset; a key
/// split across runs is [`bale_format::FormatError::SplitSample`]), an output
/// name that exists without `force` ([`PackError::WouldReplace`]) or that is
/// one of the tars ([`PackError::WouldDeleteInput`]), another command
/// writing the directory, I/O errors, cancellation. Nothing this run wrote
/// is left.
pub fn index(
    opts: &IndexOptions,
    progress: &dyn IndexProgress,
    cancel: &AtomicBool,
) -> Result<IndexSummary> {
    let started = Instant::now();
    if opts.shards.is_empty() {
        return Err(PackError::Option("no tar files to index".into()));
    }
    if opts.append && (opts.force || opts.wids_json.is_some()) {
        return Err(PackError::Option(
            "--append adds tars to the dataset in the output: it takes neither --force nor \
             --wids-json"
                .into(),
        ));
    }
    let mut out = Output::alongside(&opts.output, opts.force || opts.append)?;
    let dir = fs::canonicalize(&opts.output).map_err(|e| PackError::io(&opts.output, e))?;
    let mut plan = plan(&opts.shards, &dir, opts.absolute)?;
    let settings = serde_json::json!({
        "checksum": opts.checksum,
        "absolute": opts.absolute,
        "rename_split": opts.split == SplitPolicy::Rename,
        "allow_split": opts.split == SplitPolicy::Regroup,
        "allow_duplicate_keys": opts.allow_duplicate_keys,
    });
    let base = match opts.append && dir.join(MANIFEST_NAME).exists() {
        true => Some(take_base(&dir, &settings, &mut plan)?),
        false => None,
    };
    let already_listed = (opts.shards.len() - plan.len()) as u64;
    // What even --force never replaces, said before the hint to use it.
    if base.is_none() {
        refuse_foreign_manifest(&dir)?;
    }
    for p in &plan {
        refuse_foreign_index(&dir, p)?;
    }
    if dir.join(MANIFEST_NAME).exists() && !opts.force && !opts.append {
        return Err(PackError::Conflict {
            path: opts.output.clone(),
            what: format!(
                "it already holds a dataset ({MANIFEST_NAME})\nhint: --force replaces its manifest, or choose another directory"
            ),
        });
    }
    let mut inputs = Inputs::default();
    for p in &plan {
        inputs.add(&p.canonical);
    }
    let wids = match &opts.wids_json {
        Some(dest) => Some(check_wids_dest(dest, &dir, &plan, &inputs, opts.force)?),
        None => None,
    };
    for p in &plan {
        if opts.wids_json.is_some() && !is_plain_name(&p.given) {
            // Checked again after the scan, by content; this catches the obvious case early.
            return Err(PackError::Option(format!(
                "--wids-json: {} is not a plain .tar, and wids reads only plain tars",
                p.given.display()
            )));
        }
        if opts.split == SplitPolicy::Regroup && !is_plain_name(&p.given) {
            return Err(PackError::Option(format!(
                "--allow-split: {} is not a plain .tar; a .tar.zst stores each sample as one zstd frame, so the \
                 members of a split sample cannot be regrouped; index it without --allow-split (or with \
                 --rename-split), or decompress it and index the plain .tar",
                p.given.display()
            )));
        }
    }
    // Every name this run writes is free (or, with force, may be made
    // free) before any scan starts. Nothing of an old dataset is removed
    // until every tar is scanned: the new indexes are written under
    // temporary names first, so a tar that fails leaves the old dataset
    // as it was.
    out.clear_temps()?;
    if base.is_none() {
        out.check_room(MANIFEST_NAME, &inputs)?;
    }
    for p in &plan {
        out.check_room(&p.index, &inputs)?;
    }
    let staged = |k: usize| {
        dir.join(format!(
            "{}{}-index-{k}.idx",
            bale_format::atomic::TEMP_PREFIX,
            std::process::id()
        ))
    };

    let scan = ScanOptions {
        checksums: opts.checksum,
        split: opts.split,
    };
    progress.start(plan.len() as u64);
    if plan.is_empty() {
        // Every tar given is in the dataset already: nothing to add.
        return Ok(summary(opts, &[], started, already_listed));
    }
    let written: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(crate::options::check_jobs(opts.jobs)?)
        .build()
        .map_err(|e| PackError::Option(format!("cannot start the worker threads: {e}")))?;
    let result: Result<Vec<(ShardEntry, ScannedShard)>> = pool.install(|| {
        plan.par_iter()
            .enumerate()
            .map(|(k, p)| {
                if cancel.load(Ordering::Relaxed) {
                    return Err(PackError::Cancelled);
                }
                let scanned = scan_shard(&p.given, &scan)?;
                let dest = staged(k);
                let sum = scanned.write_index(&dest)?;
                written
                    .lock()
                    .map_err(|_| {
                        PackError::io(&dir, std::io::Error::other("a worker thread panicked"))
                    })?
                    .push(dest);
                progress.shard_indexed();
                let entry = scanned.manifest_entry(p.file.clone(), p.index.clone(), sum);
                Ok((entry, scanned))
            })
            .collect()
    });
    for f in written.into_inner().unwrap_or_default() {
        out.track(f);
    }
    let done = result?;
    if cancel.load(Ordering::Relaxed) {
        return Err(PackError::Cancelled);
    }
    if !opts.allow_duplicate_keys {
        let staged: Vec<_> = (0..plan.len())
            .map(|k| bale_format::ShardIndex::open(staged(k)))
            .collect::<std::result::Result<_, _>>()?;
        let refs: Vec<&bale_format::ShardIndex> = staged.iter().collect();
        if let Some(d) = bale_format::duplicate_keys(&refs, 1).first() {
            let (a, b) = (&plan[d.first.0].given, &plan[d.second.0].given);
            return Err(PackError::BadTar {
                path: b.clone(),
                what: format!(
                    "its sample {} has the key {:?}, which sample {} of {} has too: keys must be \
                     unique across the tars (a lookup by key could not tell them apart); rename \
                     the samples, index the tars as separate datasets, or pass \
                     --allow-duplicate-keys",
                    d.second.1,
                    d.key,
                    d.first.1,
                    bale_format::shown(a)
                ),
            });
        }
    }
    if let Some(b) = base.as_ref().filter(|_| !opts.allow_duplicate_keys) {
        let mut keys = Vec::new();
        for (k, p) in plan.iter().enumerate() {
            let idx = bale_format::ShardIndex::open(staged(k))?;
            keys.extend((0..idx.len()).map(|i| (idx.key(i).to_owned(), p.given.clone())));
        }
        let keys: Vec<(&str, &Path)> = keys
            .iter()
            .map(|(k, p)| (k.as_str(), p.as_path()))
            .collect();
        b.refuse_held_keys(&keys)?;
    }
    // The wids file is written beside its place under a temporary name,
    // and takes its name with the indexes: a run that fails before (a bad
    // tar) keeps the old one.
    let wids_staged = match &wids {
        Some(dest) => {
            let bytes = wids_bytes(dest, &plan, &done, opts.absolute)?;
            let mut f = bale_format::atomic::AtomicFile::create(dest)?;
            std::io::Write::write_all(&mut f, &bytes)
                .map_err(|e| PackError::io(f.tmp_path(), e))?;
            Some(f)
        }
        None => None,
    };
    // Every tar scanned: the old manifest goes first, then each new index
    // takes its name.
    // Checked again: the scan may have taken minutes, and a file that
    // appeared meanwhile is not replaced unless it is bale's.
    if base.is_none() {
        refuse_foreign_manifest(&dir)?;
        out.make_room(MANIFEST_NAME, &inputs)?;
    }
    for p in &plan {
        refuse_foreign_index(&dir, p)?;
    }
    if base.is_some() {
        out.mark_append()?;
    }
    for (k, p) in plan.iter().enumerate() {
        out.make_room(&p.index, &inputs)?;
        let dest = dir.join(&p.index);
        bale_format::files::rename_noreplace(&staged(k), &dest)
            .map_err(|e| PackError::io(&dest, e))?;
        out.track(dest);
    }
    // The old dataset is gone from here (its manifest first): the wids file
    // replaces the old one with the rest.
    if let Some(f) = wids_staged {
        let dest = f.dest().to_path_buf();
        if opts.force {
            f.commit_replacing()?;
        } else {
            f.commit()?;
        }
        out.track(dest);
    }
    let entries: Vec<ShardEntry> = done.iter().map(|(e, _)| e.clone()).collect();
    if let Some(b) = &base {
        let manifest = b.manifest(entries, None, 0);
        bale_format::atomic::replace_atomic(Manifest::path_in(&dir), &manifest.to_bytes())?;
    } else {
        let created_by = CreatedBy {
            tool: "bale".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            command: "index".into(),
            options: settings,
        };
        Manifest::new(entries, None, created_by).write(&dir)?;
    }
    out.commit();
    Ok(summary(opts, &done, started, already_listed))
}

/// For an append: the dataset in `dir`, checked against the run's
/// `settings`; the tars of `plan` it lists already are taken out. Refuses a
/// new tar whose index would take the name of one the dataset lists.
fn take_base(
    dir: &Path,
    settings: &serde_json::Value,
    plan: &mut Vec<Planned>,
) -> Result<Base<serde_json::Value>> {
    let manifest = Manifest::read(dir)?;
    let base = Base::of(dir, manifest, &[], "index", (&["index"], "`bale index`"))?;
    base.check_recorded(settings, &SETTINGS)?;
    let listed = |f: &str| {
        let p = Manifest::resolve(dir, f);
        fs::canonicalize(&p).unwrap_or(p)
    };
    let files: HashMap<PathBuf, &str> = base
        .manifest
        .shards
        .iter()
        .map(|e| (listed(&e.file), e.file.as_str()))
        .collect();
    plan.retain(|p| !files.contains_key(&p.canonical));
    let indexes: HashMap<&str, &str> = base
        .manifest
        .shards
        .iter()
        .map(|e| (e.index.as_str(), e.file.as_str()))
        .collect();
    if let Some((p, tar)) = plan
        .iter()
        .find_map(|p| indexes.get(p.index.as_str()).map(|t| (p, t)))
    {
        return Err(PackError::AppendMismatch {
            dir: dir.to_path_buf(),
            what: format!(
                "the index of {} would be {}, the index of {tar} in the dataset: tars of the \
                 same name index into different directories",
                bale_format::shown(&p.given),
                p.index
            ),
        });
    }
    Ok(base)
}

/// What a run that indexed `done` did.
fn summary(
    opts: &IndexOptions,
    done: &[(ShardEntry, ScannedShard)],
    started: Instant,
    already_listed: u64,
) -> IndexSummary {
    IndexSummary {
        output: opts.output.display().to_string(),
        samples: done.iter().map(|(e, _)| e.samples).sum(),
        members: done.iter().map(|(e, _)| e.members).sum(),
        bytes: done.iter().map(|(e, _)| e.bytes).sum(),
        bytes_read: done.iter().map(|(_, s)| s.stats.bytes_read).sum(),
        checksums: opts.checksum,
        wids_json: opts.wids_json.as_ref().map(|p| p.display().to_string()),
        seconds: started.elapsed().as_secs_f64(),
        already_listed,
        shards: done
            .iter()
            .map(|(e, s)| IndexedShard {
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
                first_renamed: s
                    .stats
                    .renamed
                    .first()
                    .map(|r| (r.tar_key.clone(), r.tar_offset, r.key.clone())),
                first_regrouped: s
                    .stats
                    .regrouped
                    .first()
                    .map(|r| (r.key.clone(), r.tar_offset, r.first_offset)),
            })
            .collect(),
    }
}

fn is_plain_name(p: &Path) -> bool {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    !(name.ends_with(".zst") || name.ends_with(".gz") || name.ends_with(".tgz"))
}

/// Works out index names and manifest paths; refuses what is not a regular
/// file, a file given twice and two files whose indexes would share a name.
fn plan(paths: &[PathBuf], out: &Path, absolute: bool) -> Result<Vec<Planned>> {
    let mut by_canonical: HashMap<PathBuf, &Path> = HashMap::new();
    let mut by_index: HashMap<String, &Path> = HashMap::new();
    let mut plan = Vec::with_capacity(paths.len());
    for given in paths {
        let url = bale_format::read_at::is_url(given);
        let canonical = if url {
            given.clone()
        } else {
            fs::canonicalize(given).map_err(|e| PackError::read(given, e))?
        };
        let meta = if url {
            None
        } else {
            Some(fs::metadata(&canonical).map_err(|e| PackError::read(given, e))?)
        };
        if let Some(meta) = meta
            && !meta.is_file()
        {
            return Err(PackError::bad_tar(
                given,
                format!(
                    "it is {}, not a regular file",
                    bale_format::files::kind_of(&meta)
                ),
            ));
        }
        if let Some(first) = by_canonical.insert(canonical.clone(), given) {
            return Err(PackError::Option(format!(
                "{} is given twice (also as {}); each shard can be in a dataset once",
                given.display(),
                first.display()
            )));
        }
        let name = canonical
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| PackError::bad_tar(given, "the file name is not UTF-8"))?;
        let index = index_file_name(name);
        if let Some(first) = by_index.insert(index.clone(), given) {
            return Err(PackError::Option(format!(
                "{} and {} would both get the index {}; index them into different directories",
                first.display(),
                given.display(),
                out.join(&index).display()
            )));
        }
        // A tar in a bucket is recorded by its URL.
        let recorded = if absolute || url {
            canonical.clone()
        } else {
            relative(&canonical, out)
        };
        let file = recorded
            .to_str()
            .ok_or_else(|| PackError::bad_tar(given, "the path is not UTF-8"))?
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
pub(crate) fn relative(target: &Path, base: &Path) -> PathBuf {
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

/// Checks where the wids JSON goes, before anything is written: never onto
/// a tar being indexed, an index or the manifest this run writes; an
/// existing file only with `force` (and it is removed then). Returns the
/// path to write, its directory resolved.
fn check_wids_dest(
    dest: &Path,
    dir: &Path,
    plan: &[Planned],
    inputs: &Inputs,
    force: bool,
) -> Result<PathBuf> {
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = dest.file_name().ok_or_else(|| {
        PackError::Option(format!("--wids-json {}: not a file name", dest.display()))
    })?;
    fs::create_dir_all(&parent).map_err(|e| PackError::io(&parent, e))?;
    let resolved = fs::canonicalize(&parent)
        .map_err(|e| PackError::io(&parent, e))?
        .join(name);
    let ours =
        std::iter::once(dir.join(MANIFEST_NAME)).chain(plan.iter().map(|p| dir.join(&p.index)));
    if let Some(clash) = ours.into_iter().find(|p| *p == resolved) {
        return Err(PackError::Conflict {
            path: dest.to_path_buf(),
            what: format!(
                "--wids-json names {}, which this run writes; choose another file",
                clash.display()
            ),
        });
    }
    if fs::symlink_metadata(&resolved).is_ok() {
        if inputs.holds(&resolved) {
            return Err(PackError::WouldDeleteInput {
                path: dest.to_path_buf(),
            });
        }
        if !force {
            return Err(PackError::WouldReplace {
                path: dest.to_path_buf(),
            });
        }
        // Replaced (by a rename) only once the run has committed.
        let meta = fs::symlink_metadata(&resolved).map_err(|e| PackError::io(&resolved, e))?;
        if !meta.is_file() && !meta.file_type().is_symlink() {
            return Err(PackError::Refused {
                what: format!(
                    "--wids-json names {}, not a file to replace",
                    bale_format::files::kind_of(&meta)
                ),
                path: dest.to_path_buf(),
            });
        }
    }
    Ok(resolved)
}

/// Refuses, --force or not, a `bale.json` in `dir` that no bale run wrote
/// (its `created_by.tool`), that is not JSON, or that is not a regular
/// file: it is not an old dataset of bale's to replace.
fn refuse_foreign_manifest(dir: &Path) -> Result<()> {
    let path = dir.join(MANIFEST_NAME);
    let refuse = |why: String| PackError::Refused {
        what: format!(
            "{why}, so even --force does not replace it; move it, or index into another \
             directory (-o)"
        ),
        path: path.clone(),
    };
    match fs::symlink_metadata(&path) {
        Err(_) => return Ok(()),
        Ok(m) if !m.is_file() => {
            return Err(refuse(format!(
                "it is {}, not a manifest bale wrote",
                bale_format::files::kind_of(&m)
            )));
        }
        Ok(_) => {}
    }
    let bytes = bale_format::files::read_capped(&path, bale_format::MAX_MANIFEST_BYTES, "manifest")
        .map_err(|e| refuse(e.to_string()))?;
    match bale_format::indexed_in_place(&bytes) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => {
            // Another command's dataset: its indexes carry checksums, and its
            // manifest the labels, classes, transforms and stats of the run;
            // an index of the tars given would keep none of that.
            let command = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|m| m["created_by"]["command"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "another command".into());
            let shards = match bale_format::listed_files(&bytes).len() / 2 {
                1 => "1 shard".to_owned(),
                n => format!("{n} shards"),
            };
            Err(PackError::Refused {
                what: format!(
                    "it is the manifest of a dataset `bale {command}` wrote ({shards}), and even \
                     --force does not replace it: an index in place would drop what that run \
                     recorded (checksummed indexes, labels, classes, stats) and keep only the \
                     tars given; to rewrite that dataset run `bale {command} --force` again, \
                     check it with `bale verify`, or index the tars into another directory (-o)"
                ),
                path: path.clone(),
            })
        }
        Err(why) => Err(refuse(format!(
            "it cannot be taken for an old dataset of bale's: {why}"
        ))),
    }
}

/// Refuses, --force or not, a file at the name of `p`'s index that is not
/// one of bale's indexes (DALI's tar indexer writes `<tar>.idx` too), or
/// that is not a regular file.
fn refuse_foreign_index(dir: &Path, p: &Planned) -> Result<()> {
    let there = dir.join(&p.index);
    let Ok(meta) = fs::symlink_metadata(&there) else {
        return Ok(());
    };
    let what = if !meta.is_file() {
        bale_format::files::kind_of(&meta).to_string()
    } else if !crate::output::is_bale_index(&there)? {
        "not one of bale's indexes (a DALI tar index has this name too)".to_owned()
    } else {
        return Ok(());
    };
    Err(PackError::Refused {
        what: format!(
            "it is where bale would write the index of {}, but it is {what}, so even --force \
             does not replace it; move it, or index into another directory (-o)",
            bale_format::shown(&p.given)
        ),
        path: there,
    })
}

/// The bytes of the wids shard index (`wids-shard-index-v1`): the shards in dataset
/// order with their sample counts and sizes, URLs relative to the JSON file's
/// directory (as wids resolves them) or absolute.
fn wids_bytes(
    dest: &Path,
    plan: &[Planned],
    done: &[(ShardEntry, ScannedShard)],
    absolute: bool,
) -> Result<Vec<u8>> {
    if let Some((e, _)) = done
        .iter()
        .find(|(e, _)| e.compression != Compression::None)
    {
        return Err(PackError::Option(format!(
            "--wids-json: {} is a .tar.zst, and wids reads only plain tars",
            e.file
        )));
    }
    if let Some((e, s)) = done.iter().find(|(_, s)| s.is_scattered()) {
        let r = &s.stats.regrouped[0];
        return Err(PackError::Option(format!(
            "--wids-json: {} has samples regrouped by --allow-split (first: {:?} at offsets {} and {}); wids reads \
             a sample as one run of consecutive members, so it would not see the regrouped sample bale indexes\n\
             hint: drop --wids-json, or use --rename-split (the samples wids sees, later runs keyed KEY~2)",
            e.file, r.key, r.first_offset, r.tar_offset
        )));
    }
    let base = dest.parent().unwrap_or(Path::new("/"));
    let shardlist = plan
        .iter()
        .zip(done)
        .map(|(p, (e, _))| {
            let url = if absolute || bale_format::read_at::is_url(&p.canonical) {
                p.canonical.clone()
            } else {
                relative(&p.canonical, base)
            };
            let url = url
                .to_str()
                .ok_or_else(|| PackError::bad_tar(&p.given, "the path is not UTF-8"))?;
            Ok(serde_json::json!({ "url": url, "nsamples": e.samples, "filesize": e.bytes }))
        })
        .collect::<Result<Vec<_>>>()?;
    let name = dest.file_stem().and_then(|s| s.to_str()).unwrap_or("bale");
    let doc = serde_json::json!({
        "__kind__": "wids-shard-index-v1",
        "wids_version": 1,
        "name": name,
        "shardlist": shardlist,
    });
    let mut bytes = serde_json::to_vec_pretty(&doc).map_err(|e| PackError::io(dest, e.into()))?;
    bytes.push(b'\n');
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

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
