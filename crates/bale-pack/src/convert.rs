//! `bale convert`: any bale dataset to any other form (tar, `.tar.zst`, HDF5,
//! or a directory of files), streaming sample by sample.
//!
//! Keys, members (extensions, bytes and their order within a sample), sample
//! order and label names are kept. Shard boundaries follow the same rule as
//! `bale pack` whatever the output format: a shard takes samples while its
//! tar-stream size (headers, padded data, end blocks) stays within
//! `shard_size`, and at most `shard_samples` of them; so converting to tar
//! with the pack's shard size gives back the pack's shards byte for byte.
//!
//! With `append`, the new shards go after those of a dataset `bale
//! convert` wrote (see [`crate::append`]): the settings it recorded must
//! be this run's, the source's class list the dataset's, and no key of the
//! source may be in the dataset.
//!
//! Memory: one sample's bytes (read with the index, member checksums
//! checked), plus for an HDF5 output the per-member bookkeeping of the open
//! shard (under 100 bytes a member; its bytes are spooled to disk).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use bale_format::atomic::TEMP_PREFIX;
use bale_format::foreign::ForeignDataset;
use bale_format::read::ShardReader;
use bale_format::{
    Compression, CreatedBy, Manifest, ShardEntry, TAR_END_LEN, shard_file_name, tar_member_len,
};
use serde::Serialize;

use crate::append::{AppendBase, Base};
use crate::error::{PackError, Result};
use crate::output::{CONVERT_STAGING, Inputs, MOVING_SUFFIX, Output};
use crate::shard_out::ShardOut;

/// The form `bale convert` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConvertFormat {
    /// Plain tar shards.
    Tar,
    /// `.tar.zst` shards at this zstd level (1-22).
    TarZst(i32),
    /// HDF5 shards (needs the `hdf5` feature).
    H5,
    /// A directory of files `<key>.<ext>`, no shards, no manifest.
    Dir,
}

impl ConvertFormat {
    fn compression(self) -> Option<(Compression, i32)> {
        match self {
            ConvertFormat::Tar => Some((Compression::None, 0)),
            ConvertFormat::TarZst(l) => Some((Compression::Zstd, l)),
            ConvertFormat::H5 => Some((Compression::H5, 0)),
            ConvertFormat::Dir => None,
        }
    }

    /// The name on the command line: `tar`, `tar.zst`, `h5` or `dir`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConvertFormat::Tar => "tar",
            ConvertFormat::TarZst(_) => "tar.zst",
            ConvertFormat::H5 => "h5",
            ConvertFormat::Dir => "dir",
        }
    }
}

/// Options of a conversion.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// The output form.
    pub format: ConvertFormat,
    /// Largest shard in tar-stream bytes (default [`crate::DEFAULT_SHARD_SIZE`]).
    pub shard_size: u64,
    /// Most samples in a shard (default: no limit).
    pub shard_samples: Option<u64>,
    /// Write into a non-empty output directory: for shard formats, bale's
    /// files there are removed first (as `bale pack --force`); for `dir`,
    /// new files go beside the existing ones, and a name that exists is an error.
    pub force: bool,
    /// Convert a bale dataset whose samples share keys (default: `false`:
    /// refused before anything is written, naming the key and both shards);
    /// recorded in the output's manifest, as `bale index` records it.
    pub allow_duplicate_keys: bool,
    /// Add the shards to the dataset in the output, which `bale convert`
    /// wrote with the same settings (an empty or missing output: a fresh
    /// conversion). Takes no `force`, and no `dir` format.
    pub append: bool,
    /// With `append`: the dataset to add to, read where it is (a prefix in
    /// object storage, by [`crate::Destination::open_appending`]), when the
    /// output directory is only where the run writes (default: the dataset
    /// in the output directory).
    pub onto: Option<AppendBase>,
}

/// The settings of `created_by.options` an append must share, and their
/// names for a mismatch.
const SETTINGS: [(&str, &str); 5] = [
    ("format", "format (--format)"),
    ("zstd_level", "zstd level (--level)"),
    ("shard_size", "shard size (--shard-size)"),
    ("shard_samples", "shard sample limit (--shard-samples)"),
    ("allow_duplicate_keys", "--allow-duplicate-keys setting"),
];

impl Default for ConvertOptions {
    fn default() -> Self {
        Self {
            format: ConvertFormat::Tar,
            shard_size: crate::DEFAULT_SHARD_SIZE,
            shard_samples: None,
            force: false,
            allow_duplicate_keys: false,
            append: false,
            onto: None,
        }
    }
}

/// Progress of a conversion; every method has an empty default.
pub trait ConvertProgress: Sync {
    /// The conversion starts: samples and member bytes to copy.
    fn start(&self, _samples: u64, _bytes: u64) {}
    /// Samples and member bytes copied so far.
    fn sample_written(&self, _samples: u64, _bytes: u64) {}
    /// A shard was finished.
    fn shard_finished(&self, _entry: &ShardEntry) {}
}

impl ConvertProgress for crate::NoProgress {}

/// What a conversion did.
#[derive(Debug, Clone, Serialize)]
pub struct ConvertSummary {
    /// The output directory.
    pub output: PathBuf,
    /// The output form.
    pub format: &'static str,
    /// What the source was: `bale`, `mds` (MosaicML Streaming) or `litdata`.
    pub source: &'static str,
    /// Samples copied.
    pub samples: u64,
    /// Members copied.
    pub members: u64,
    /// Member bytes copied.
    pub bytes: u64,
    /// Shards written (0 for `dir`).
    pub shards: u64,
    /// Bytes of the output's shard files (member bytes for `dir`).
    pub output_bytes: u64,
    /// With `append` onto a dataset: the samples it held before.
    pub appended_to: Option<u64>,
}

impl ConvertSummary {
    fn new(
        dst: &Path,
        source: &'static str,
        opts: &ConvertOptions,
        (samples, members, bytes): (u64, u64, u64),
        shards: u64,
        output_bytes: u64,
    ) -> Self {
        ConvertSummary {
            output: dst.to_path_buf(),
            format: opts.format.as_str(),
            source,
            samples,
            members,
            bytes,
            shards,
            output_bytes,
            appended_to: None,
        }
    }
}

/// Converts the dataset in `src` into `dst`.
///
/// Every member is checked against its index checksum as it is read. The
/// output is atomic as a pack's is: shards and indexes under temporary names,
/// the manifest last; on error or cancellation nothing that looks complete
/// is left (see [`convert`]'s module docs for `dir`).
///
/// # Errors
/// An unreadable or corrupt source (naming shard, key and offset), an output
/// that is not empty (without `force`), I/O errors, cancellation, `h5`
/// without the `hdf5` feature, and for `dir` any key or extension that
/// would escape the output directory.
pub fn convert(
    src: &Path,
    dst: &Path,
    opts: &ConvertOptions,
    progress: &dyn ConvertProgress,
    cancel: &AtomicBool,
) -> Result<ConvertSummary> {
    if opts.shard_size == 0 {
        return Err(PackError::Option(
            "--shard-size must be at least 1 byte".into(),
        ));
    }
    if opts.shard_samples == Some(0) {
        return Err(PackError::Option(
            "--shard-samples must be at least 1".into(),
        ));
    }
    let source = open_source(src)?;
    check_keys(&source, opts.allow_duplicate_keys)?;
    if same_dir(src, dst) {
        return Err(PackError::Option(format!(
            "the output {} is the source dataset",
            dst.display()
        )));
    }
    if opts.append {
        if opts.force || opts.format == ConvertFormat::Dir {
            return Err(PackError::Option(
                "--append adds shards to the dataset in the output: it takes neither --force \
                 nor --format dir"
                    .into(),
            ));
        }
        crate::packer::refuse_input_in_output(&[src.to_path_buf()], dst)?;
    }
    progress.start(source.samples(), source.bytes());
    match opts.format.compression() {
        Some((c, level)) => to_shards(&source, dst, opts, c, level, progress, cancel),
        None => to_dir(&source, dst, opts, progress, cancel),
    }
}

/// Checks that `src` is a dataset [`convert`] reads, and returns the URLs
/// of the objects in object storage it would read (the shards and indexes
/// a manifest names by URL, as `bale index` of tars in a bucket writes).
/// Run before an output in object storage is taken, so that a source that
/// cannot be read fails before `--force` removes anything there, and so that
/// `--force` never removes an object the conversion reads.
///
/// # Errors
/// As [`convert`] for its source.
pub fn convert_inputs(src: &Path) -> Result<Vec<String>> {
    match open_source(src)? {
        Source::Bale { manifest, .. } => Ok(manifest
            .shards
            .iter()
            .flat_map(|s| [&s.file, &s.index])
            .filter(|f| bale_storage::url_scheme(f).is_some())
            .cloned()
            .collect()),
        Source::Foreign { .. } => Ok(Vec::new()),
    }
}

/// A bale dataset (`bale.json`), else a MosaicML Streaming or LitData one
/// (`index.json`).
fn open_source(src: &Path) -> Result<Source> {
    if !Manifest::path_in(src).exists() && bale_format::foreign::detect(src)?.is_some() {
        return Ok(Source::Foreign {
            dir: src.to_path_buf(),
            dataset: ForeignDataset::open(src)?,
        });
    }
    match Manifest::read(src) {
        Ok(manifest) => Ok(Source::Bale {
            dir: src.to_path_buf(),
            manifest,
        }),
        Err(bale_format::FormatError::Incomplete { .. }) => Err(PackError::Option(format!(
            "{} is not a dataset bale converts: it has no bale.json, nor an index.json that MosaicML Streaming (MDS) or LitData wrote",
            src.display()
        ))),
        Err(e) => Err(e.into()),
    }
}

/// Refuses a bale source whose samples share a key, unless `allow`,
/// naming the key and both shards: the output would repeat the ambiguity
/// (and `--format dir` would collide on the file names). MDS and LitData
/// keys are sample numbers, unique by construction. One merged pass over
/// the indexes' hash-sorted lookup tables.
fn check_keys(source: &Source, allow: bool) -> Result<()> {
    let Source::Bale { dir, manifest } = source else {
        return Ok(());
    };
    if allow {
        return Ok(());
    }
    let opened = manifest
        .shards
        .iter()
        .map(|e| bale_format::ShardIndex::open(Manifest::resolve(dir, &e.index)))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let refs: Vec<&bale_format::ShardIndex> = opened.iter().collect();
    let Some(d) = bale_format::duplicate_keys(&refs, 1).into_iter().next() else {
        return Ok(());
    };
    let shard = |k: usize| Manifest::resolve(dir, &manifest.shards[k].file);
    Err(PackError::Option(format!(
        "{}: its sample {} has the key {:?}, which sample {} of {} has too (the source was \
         indexed with --allow-duplicate-keys); a lookup by key in the output could not tell \
         them apart: pass --allow-duplicate-keys to convert it anyway",
        bale_format::shown(&shard(d.second.0)),
        d.second.1,
        d.key,
        d.first.1,
        bale_format::shown(&shard(d.first.0)),
    )))
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// What `bale convert` reads.
enum Source {
    /// A bale dataset.
    Bale { dir: PathBuf, manifest: Manifest },
    /// A MosaicML Streaming or LitData dataset.
    Foreign {
        dir: PathBuf,
        dataset: ForeignDataset,
    },
}

impl Source {
    fn kind(&self) -> &'static str {
        match self {
            Source::Bale { .. } => "bale",
            Source::Foreign { dataset, .. } => dataset.kind().as_str(),
        }
    }

    fn samples(&self) -> u64 {
        match self {
            Source::Bale { manifest, .. } => manifest.samples,
            Source::Foreign { dataset, .. } => dataset.samples(),
        }
    }

    /// Member bytes (bale) or shard bytes (others) to read, for progress.
    fn bytes(&self) -> u64 {
        match self {
            Source::Bale { manifest, .. } => manifest.fields.values().map(|f| f.bytes).sum(),
            Source::Foreign { dataset, .. } => dataset.bytes(),
        }
    }

    fn labels(&self) -> Option<Vec<String>> {
        match self {
            Source::Bale { manifest, .. } => manifest.labels.clone(),
            Source::Foreign { .. } => None,
        }
    }

    /// Every key, with the file it is read from (for an append's check).
    fn keys(&self) -> Result<Vec<(String, PathBuf)>> {
        let mut keys = Vec::new();
        match self {
            Source::Bale { dir, manifest } => {
                for e in &manifest.shards {
                    let index = Manifest::resolve(dir, &e.index);
                    let idx =
                        bale_format::ShardIndex::open_expecting(&index, e.samples, e.members)?;
                    let file = Manifest::resolve(dir, &e.file);
                    keys.extend((0..idx.len()).map(|i| (idx.key(i).to_owned(), file.clone())));
                }
            }
            Source::Foreign { dir, dataset } => {
                let index = dir.join("index.json");
                keys.extend((0..dataset.samples()).map(|i| (dataset.key(i), index.clone())));
            }
        }
        Ok(keys)
    }

    fn skipped(&self) -> u64 {
        match self {
            Source::Bale { manifest, .. } => manifest.skipped,
            Source::Foreign { .. } => 0,
        }
    }

    /// The files the source consists of: `--force` never removes them.
    fn inputs(&self) -> Inputs {
        let mut inputs = Inputs::default();
        match self {
            Source::Bale { dir, manifest } => {
                inputs.add(&Manifest::path_in(dir));
                for e in &manifest.shards {
                    inputs.add(&Manifest::resolve(dir, &e.file));
                    inputs.add(&Manifest::resolve(dir, &e.index));
                }
            }
            Source::Foreign { dir, dataset } => {
                inputs.add(dir);
                for f in dataset.files() {
                    inputs.add(&f);
                }
            }
        }
        inputs
    }

    /// Calls `f(key, members)` for every sample in dataset order.
    fn for_each(
        &self,
        cancel: &AtomicBool,
        f: impl FnMut(&str, &[(String, Vec<u8>)]) -> Result<()>,
    ) -> Result<()> {
        match self {
            Source::Bale { dir, manifest } => for_each_bale(dir, manifest, cancel, f),
            Source::Foreign { dataset, .. } => {
                dataset.for_each(&|| cancel.load(Ordering::Relaxed), f)?;
                if cancel.load(Ordering::Relaxed) {
                    return Err(PackError::Cancelled);
                }
                Ok(())
            }
        }
    }
}

/// Calls `f(key, members)` for every sample of a bale dataset, checking
/// members against their index checksums.
fn for_each_bale(
    dir: &Path,
    manifest: &Manifest,
    cancel: &AtomicBool,
    mut f: impl FnMut(&str, &[(String, Vec<u8>)]) -> Result<()>,
) -> Result<()> {
    for (i, entry) in manifest.shards.iter().enumerate() {
        let file = Manifest::resolve(dir, &entry.file);
        let index = Manifest::resolve(dir, &entry.index);
        let reader = ShardReader::open(&file, &index)?;
        if let Some(what) = entry.index_mismatch(reader.index()) {
            return Err(PackError::Format(bale_format::FormatError::Manifest {
                path: Manifest::path_in(dir),
                what: format!("shard {i} ({}): {what}; run `bale verify`", entry.file),
            }));
        }
        for s in 0..reader.len() {
            if cancel.load(Ordering::Relaxed) {
                return Err(PackError::Cancelled);
            }
            let sample = reader.read(s, true)?;
            f(&sample.key, &sample.members)?;
        }
    }
    Ok(())
}

fn to_shards(
    src: &Source,
    dst: &Path,
    opts: &ConvertOptions,
    compression: Compression,
    level: i32,
    progress: &dyn ConvertProgress,
    cancel: &AtomicBool,
) -> Result<ConvertSummary> {
    if compression == Compression::H5 && cfg!(not(feature = "hdf5")) {
        return Err(PackError::Option(format!(
            "--format h5: {}",
            bale_format::h5::NO_HDF5
        )));
    }
    let settings = serde_json::json!({
        "format": opts.format.as_str(),
        "source": src.kind(),
        "shard_size": opts.shard_size,
        "shard_samples": opts.shard_samples,
        "zstd_level": match opts.format { ConvertFormat::TarZst(l) => Some(l), _ => None },
        "allow_duplicate_keys": opts.allow_duplicate_keys,
    });
    let (mut out, base) = open_output(src, dst, opts, &settings)?;
    let first = base.as_ref().map_or(0, |b| b.first_shard);
    let mut shards: Vec<ShardEntry> = Vec::new();
    let mut cur: Option<(ShardOut, u64, u64)> = None;
    let (mut samples, mut members, mut bytes) = (0u64, 0u64, 0u64);
    let end_blocks = TAR_END_LEN;
    let mut shard_keys = std::collections::HashSet::new();
    src.for_each(cancel, |key, list| {
        let tar: u64 = list
            .iter()
            .map(|(ext, d)| tar_member_len(key, ext, d.len() as u64))
            .sum();
        // A key the open shard holds already (allowed duplicates only: a
        // shard's keys are unique) starts the next shard.
        let repeated = opts.allow_duplicate_keys && shard_keys.contains(key);
        let full = cur.as_ref().is_some_and(|(_, tar_bytes, n)| {
            repeated
                || tar_bytes + tar + end_blocks > opts.shard_size
                || opts.shard_samples.is_some_and(|m| *n >= m)
        });
        if full {
            shard_keys.clear();
        }
        if opts.allow_duplicate_keys {
            shard_keys.insert(key.to_owned());
        }
        if full && let Some((w, _, _)) = cur.take() {
            let entry = w.finish()?;
            out.track(dst.join(&entry.file));
            out.track(dst.join(&entry.index));
            progress.shard_finished(&entry);
            shards.push(entry);
        }
        if cur.is_none() {
            let name = shard_file_name("shard", first + shards.len() as u64, compression);
            cur = Some((ShardOut::create(dst, &name, compression, level)?, 0, 0));
        }
        let (w, tar_bytes, n) = cur.as_mut().expect("opened above");
        w.begin_sample(key)?;
        for (ext, data) in list {
            w.add_member(ext, data)?;
            bytes += data.len() as u64;
        }
        w.end_sample()?;
        *tar_bytes += tar;
        *n += 1;
        samples += 1;
        members += list.len() as u64;
        progress.sample_written(samples, bytes);
        Ok(())
    })?;
    if let Some((w, _, _)) = cur.take() {
        let entry = w.finish()?;
        out.track(dst.join(&entry.file));
        out.track(dst.join(&entry.index));
        progress.shard_finished(&entry);
        shards.push(entry);
    }
    let written = shards.len();
    let manifest = if let Some(b) = &base {
        let manifest = b.manifest(shards, src.labels(), src.skipped());
        bale_format::atomic::replace_atomic(Manifest::path_in(dst), &manifest.to_bytes())?;
        manifest
    } else {
        let created_by = CreatedBy {
            tool: "bale".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            command: "convert".into(),
            options: settings,
        };
        let mut manifest = Manifest::new(shards, src.labels(), created_by);
        manifest.skipped = src.skipped();
        manifest.write(dst)?;
        manifest
    };
    out.commit();
    let new = &manifest.shards[manifest.shards.len() - written..];
    let mut summary = ConvertSummary::new(
        dst,
        src.kind(),
        opts,
        (samples, members, bytes),
        written as u64,
        new.iter().map(|e| e.bytes).sum(),
    );
    summary.appended_to = base.map(|b| b.manifest.samples);
    Ok(summary)
}

/// Takes the output of a conversion to shards whose manifest records
/// `settings`: a fresh one (cleared with `force`), or with `append` the
/// dataset there, checked against the run before anything is written.
fn open_output(
    src: &Source,
    dst: &Path,
    opts: &ConvertOptions,
    settings: &serde_json::Value,
) -> Result<(Output, Option<Base<serde_json::Value>>)> {
    if !opts.append {
        let mut out = Output::open(dst, opts.force)?;
        out.clear(&src.inputs())?;
        return Ok((out, None));
    }
    let (out, base) = match &opts.onto {
        Some(a) => (Output::open(dst, false)?, Some(a.for_convert()?)),
        None => {
            let (out, found) = Output::open_append(dst)?;
            let base = found.map(|(m, names)| convert_base(dst, m, &names));
            (out, base.transpose()?)
        }
    };
    let Some(base) = base else {
        return Ok((out, None));
    };
    base.check_recorded(settings, &SETTINGS)?;
    let (had, has) = (&base.manifest.labels, src.labels());
    if *had != has {
        let list = |l: &Option<Vec<String>>| {
            l.as_ref()
                .map_or("none".into(), |c| format!("[{}]", c.join(", ")))
        };
        return Err(PackError::AppendMismatch {
            dir: dst.to_path_buf(),
            what: format!(
                "the source's classes are {}, the dataset's {}: converted samples keep \
                 their class numbers, so an append needs the same class list",
                list(&has),
                list(had)
            ),
        });
    }
    if !opts.allow_duplicate_keys {
        let keys = src.keys()?;
        let keys: Vec<(&str, &Path)> = keys
            .iter()
            .map(|(k, f)| (k.as_str(), f.as_path()))
            .collect();
        base.refuse_held_keys(&keys)?;
    }
    Ok((out, Some(base)))
}

/// The dataset of `manifest` in `dir` (a directory, or a prefix's URL),
/// which holds the names `names`, for `bale convert --append`: one that
/// `bale convert` wrote.
fn convert_base(
    dir: &Path,
    manifest: bale_format::Manifest,
    names: &[String],
) -> Result<Base<serde_json::Value>> {
    let takes: (&[&str], &str) = (&["convert"], "`bale convert`");
    Base::of(dir, manifest, names, "convert", takes)
}

impl AppendBase {
    /// The base of `bale convert --append`.
    pub(crate) fn for_convert(&self) -> Result<Base<serde_json::Value>> {
        convert_base(&self.dir, self.manifest.clone(), &self.names)
    }
}

/// A failed [`move_in`]: its error, and whether part of the export stayed
/// in the output (a move back failed too).
#[derive(Debug)]
struct MoveFailure {
    error: PackError,
    partial: bool,
}

/// Moves the entries `names` of `staging` into `dst`, each with one rename
/// that never replaces a name. When one fails, those already moved are
/// moved back and `marker` is removed: nothing of the export is left in
/// `dst`. When a move back fails too, `marker` (which lists the names)
/// stays, and the error says where each part is.
fn move_in(
    staging: &Path,
    dst: &Path,
    names: &[std::ffi::OsString],
    marker: &Path,
) -> std::result::Result<(), MoveFailure> {
    use bale_format::files::rename_noreplace;
    for (k, name) in names.iter().enumerate() {
        let target = dst.join(name);
        let Err(e) = rename_noreplace(&staging.join(name), &target) else {
            continue;
        };
        let stuck: Vec<(String, io::Error)> = names[..k]
            .iter()
            .rev()
            .filter_map(|moved| {
                rename_noreplace(&dst.join(moved), &staging.join(moved))
                    .err()
                    .map(|e| (bale_format::shown(&dst.join(moved)).to_string(), e))
            })
            .collect();
        if stuck.is_empty() {
            let _ = fs::remove_file(marker);
            return Err(MoveFailure {
                error: PackError::io(&target, e),
                partial: false,
            });
        }
        let list: Vec<String> = stuck.iter().map(|(p, e)| format!("{p} ({e})")).collect();
        return Err(MoveFailure {
            error: PackError::Partial {
                what: format!(
                    "moving the export in failed ({e}), and moving back what was moved failed \
                     too: {} stayed in place, the rest is in {}; {} lists the names. Move \
                     every entry of that folder in, or delete what the list names, then \
                     delete both",
                    list.join(", "),
                    bale_format::shown(staging),
                    bale_format::shown(marker),
                ),
                path: target,
            },
            partial: true,
        });
    }
    Ok(())
}

/// Removes the staging directory on drop, unless done.
struct Staging {
    dir: PathBuf,
    done: bool,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn to_dir(
    src: &Source,
    dst: &Path,
    opts: &ConvertOptions,
    progress: &dyn ConvertProgress,
    cancel: &AtomicBool,
) -> Result<ConvertSummary> {
    // Locked, and removed again on failure when this run created it.
    let out = Output::open(dst, opts.force)?;
    out.clear_temps()?;
    // Everything is written into a fresh staging directory inside the output
    // (no symlink can be there but ours: we make none), then moved in place.
    let mut staging = Staging {
        dir: dst.join(format!(
            "{TEMP_PREFIX}{}-{CONVERT_STAGING}",
            std::process::id()
        )),
        done: false,
    };
    fs::create_dir(&staging.dir).map_err(|e| PackError::io(&staging.dir, e))?;
    let (mut samples, mut members, mut bytes) = (0u64, 0u64, 0u64);
    src.for_each(cancel, |key, list| {
        for (ext, data) in list {
            let rel = bale_format::files::member_path(key, ext)?;
            bale_format::files::create_parents(&staging.dir, &rel)?;
            let path = staging.dir.join(&rel);
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| PackError::io(&path, e))?;
            io::Write::write_all(&mut f, data).map_err(|e| PackError::io(&path, e))?;
            bytes += data.len() as u64;
        }
        samples += 1;
        members += list.len() as u64;
        progress.sample_written(samples, bytes);
        Ok(())
    })?;
    // Move the staged top-level entries into the output, never over an
    // existing name (a file, a directory, or a symlink that could point
    // anywhere): all are checked before the first is moved.
    let mut names = Vec::new();
    for entry in fs::read_dir(&staging.dir).map_err(|e| PackError::io(&staging.dir, e))? {
        let name = entry
            .map_err(|e| PackError::io(&staging.dir, e))?
            .file_name();
        let target = dst.join(&name);
        if fs::symlink_metadata(&target).is_ok() {
            return Err(PackError::Conflict {
                path: target,
                what: "it already exists in the output: refusing to write over it or through \
                       it (convert --format dir writes new names only)"
                    .into(),
            });
        }
        names.push(name);
    }
    // The moves are one rename each, not one for all: a marker, synced
    // before the first, says that the output holds part of an export until
    // the last is done. A run killed in between leaves it, and the next
    // `--force` run refuses to clear the staging folder, the only other copy
    // of the rest (`remove_temps`).
    let marker = staging.dir.with_file_name(format!(
        "{}{MOVING_SUFFIX}",
        staging
            .dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
    ));
    let listing: String = names
        .iter()
        .map(|n| format!("{}\n", bale_format::shown(Path::new(n))))
        .collect();
    bale_format::atomic::write_atomic(&marker, listing.as_bytes())?;
    if let Err(failed) = move_in(&staging.dir, dst, &names, &marker) {
        // Part of the export stayed in place: the staging folder holds the
        // rest, and the marker stays to say so.
        staging.done = failed.partial;
        return Err(failed.error);
    }
    fs::remove_dir(&staging.dir).map_err(|e| PackError::io(&staging.dir, e))?;
    staging.done = true;
    bale_format::atomic::sync_dir(&dst.join("x"));
    fs::remove_file(&marker).map_err(|e| PackError::io(&marker, e))?;
    out.commit();
    bale_format::atomic::sync_dir(&dst.join("x"));
    Ok(ConvertSummary::new(
        dst,
        src.kind(),
        opts,
        (samples, members, bytes),
        0,
        bytes,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entries of `dir`, sorted.
    fn names_in(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_move_in_that_fails_half_way_moves_everything_back() {
        let t = tempfile::tempdir().unwrap();
        let (staging, dst) = (t.path().join("staging"), t.path().join("dst"));
        for name in ["a", "b", "c"] {
            fs::create_dir_all(staging.join(name)).unwrap();
            fs::write(staging.join(name).join("0.txt"), name).unwrap();
        }
        fs::create_dir(&dst).unwrap();
        let marker = dst.join(".bale-tmp-1-convert.moving");
        fs::write(&marker, b"a\nb\nc\n").unwrap();
        // `b` appeared in the output after the check: its move fails, and
        // `a`, already moved, goes back.
        fs::create_dir(dst.join("b")).unwrap();
        let names: Vec<std::ffi::OsString> = ["a", "b", "c"].iter().map(Into::into).collect();
        let failed = move_in(&staging, &dst, &names, &marker).unwrap_err();
        assert!(!failed.partial, "{:?}", failed.error);
        assert!(
            failed.error.to_string().contains("dst/b"),
            "{}",
            failed.error
        );
        assert_eq!(names_in(&dst), ["b"]);
        assert_eq!(names_in(&staging), ["a", "b", "c"]);
        assert_eq!(fs::read(staging.join("a/0.txt")).unwrap(), b"a");
        // Without the obstacle, all move in; the caller removes the marker.
        fs::remove_dir(dst.join("b")).unwrap();
        fs::write(&marker, b"a\nb\nc\n").unwrap();
        move_in(&staging, &dst, &names, &marker).unwrap();
        assert_eq!(
            names_in(&dst),
            [".bale-tmp-1-convert.moving", "a", "b", "c"]
        );
        assert!(names_in(&staging).is_empty());
    }
}
