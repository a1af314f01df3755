//! Checking a dataset on disk: every finding listed, not just the first.
//!
//! The checks are pure format logic; the caller decides how to run them (the
//! `bale verify` command runs [`check_shard`] for many shards in parallel and
//! draws progress through a [`Visitor`]).
//!
//! - [`load_manifest`] reads `bale.json`, returning a manifest that fails its
//!   own consistency checks as a finding rather than an error, so the shards
//!   can still be checked.
//! - [`check_manifest`] compares the manifest's totals with its shard entries
//!   and looks for files in the dataset directory that the manifest does not
//!   list (unknown shards, leftover temporary files).
//! - [`check_shard_with`] checks one shard and its index at a [`Level`], matching
//!   tar member names with index keys by the dataset's [`NameRules`]
//!   ([`check_shard`] uses the default rules).
//! - [`Checksums::of`] and [`checksums_warning`] say whether the indexes record
//!   member checksums: `bale index` without `--checksum` writes indexes without
//!   them, and then member bytes cannot be checked, only the structure.
//!
//! [`Level::Full`] checks the index against the manifest (its checksum, counts,
//! sizes and per-extension totals), the shard's presence and length, the xxh3
//! of the whole shard file when the manifest records it, and then reads the
//! shard sequentially once, comparing every tar member (name, offset, size)
//! with the index in order and every member's bytes with its checksum.
//! [`Level::Quick`] does the same index and size checks, then reads only the tar
//! headers of every member at the offsets the index gives (for `.tar.zst`
//! shards it must decompress each sample's frame to see them), without member
//! checksums. Between two members of one sample it steps over the entries
//! that belong to no sample (directories, links, files without an extension),
//! as `bale index` and WebDataset do.
//!
//! Tar names are compared with index keys as `bale index` reads them: a
//! leading `./` is removed, and with [`NameRules::renamed_splits`] an index key
//! `K~N` matches tar members named `K.EXT`. When an index records no member
//! checksums ([`ShardIndex::has_checksums`] is false), the full check compares
//! every member's name, offset and size with the index but not its bytes.
//!
//! ```
//! use bale_format::verify::{Level, check_manifest, check_shard, load_manifest};
//! use bale_format::{Compression, CreatedBy, Manifest, Member, ShardFileWriter};
//! let dir = tempfile::tempdir()?;
//! let mut w = ShardFileWriter::create(dir.path(), "shard-000000.tar", Compression::None, 0)?;
//! w.writer().write_sample("a", &[Member { ext: "txt", data: b"hello" }])?;
//! let created_by = CreatedBy { tool: "bale".into(), version: "0".into(), command: "doc".into(), options: Default::default() };
//! Manifest::new(vec![w.finish()?], None, created_by).write(dir.path())?;
//!
//! let (manifest, mut problems) = load_manifest(dir.path())?;
//! let manifest = manifest.expect("a valid manifest");
//! problems.extend(check_manifest(dir.path(), &manifest));
//! let report = check_shard(dir.path(), &manifest.shards[0], Level::Full, &mut ());
//! problems.extend(report.problems);
//! assert!(problems.is_empty());
//!
//! // Flip one bit of the member's data: the full check names key and member.
//! let path = dir.path().join("shard-000000.tar");
//! let mut bytes = std::fs::read(&path)?;
//! bytes[512] ^= 1;
//! std::fs::write(&path, bytes)?;
//! let report = check_shard(dir.path(), &manifest.shards[0], Level::Full, &mut ());
//! assert!(report.problems.iter().any(|p| p.key.as_deref() == Some("a") && p.what.contains("checksum mismatch")));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::hash::Xxh3;
use serde::{Deserialize, Serialize};

use crate::atomic::TEMP_PREFIX;
use crate::error::FormatError;
use crate::index::{Compression, ShardIndex, checksum};
use crate::manifest::{FieldStats, MANIFEST_NAME, Manifest, ShardEntry, hex64};
use crate::name::split_member_name;
use crate::read::{read_exact_at, read_sample};
use crate::scan::normalize_member_name;
use crate::stream::{STREAM_BUFFER, SampleStream};
use crate::tar::{EntryKind, TarReader};

/// At most this many problems are listed per shard; the rest are counted.
pub const MAX_PROBLEMS_PER_SHARD: usize = 100;

/// How thoroughly to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Sizes, index checksums against the manifest, and every member's tar
    /// header at the index's offsets; no member data is read (except that
    /// `.tar.zst` frames are decompressed to reach their headers).
    Quick,
    /// Everything: the quick checks' index and size checks, the xxh3 of the
    /// whole shard file, and one sequential pass comparing every tar member
    /// and its checksum with the index.
    #[default]
    Full,
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The dataset is damaged or inconsistent.
    Error,
    /// Worth knowing, but readers are not affected (a leftover temporary file).
    Warning,
}

/// One thing wrong with a dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The file concerned, as the manifest names it (`shard-000003.tar`), or
    /// `bale.json`, or the name of an unknown file.
    pub shard: String,
    /// The sample's key, when the problem concerns one sample.
    pub key: Option<String>,
    /// The member's extension, when the problem concerns one member.
    pub member: Option<String>,
    /// Byte offset in the file (in the uncompressed tar stream for members of
    /// a `.tar.zst`), when known.
    pub offset: Option<u64>,
    /// What is wrong, in words.
    pub what: String,
    /// Error or warning.
    pub severity: Severity,
}

impl Problem {
    /// An error-level problem about `shard` as a whole.
    pub fn new(shard: impl Into<String>, what: impl Into<String>) -> Self {
        Problem {
            shard: shard.into(),
            key: None,
            member: None,
            offset: None,
            what: what.into(),
            severity: Severity::Error,
        }
    }

    /// Sets the key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the member's extension.
    pub fn member(mut self, ext: impl Into<String>) -> Self {
        self.member = Some(ext.into());
        self
    }

    /// Sets the offset.
    pub fn offset(mut self, offset: u64) -> Self {
        self.offset = Some(offset);
        self
    }

    /// Makes it a warning.
    pub fn warning(mut self) -> Self {
        self.severity = Severity::Warning;
        self
    }

    /// Whether this is an error (not a warning).
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Problem {
    /// `shard-000003.tar: key "cat/0001" member "jpg" at offset 1536: checksum mismatch ...`,
    /// with `warning: ` in front of warnings.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.severity == Severity::Warning {
            f.write_str("warning: ")?;
        }
        f.write_str(&self.shard)?;
        if let Some(k) = &self.key {
            write!(f, ": key {k:?}")?;
        }
        if let Some(m) = &self.member {
            write!(f, " member {m:?}")?;
        }
        if let Some(o) = self.offset {
            write!(f, " at offset {o}")?;
        }
        write!(f, ": {}", self.what)
    }
}

/// Receives what a shard check reads: member bytes to inspect further, and progress.
///
/// `()` is the visitor that does nothing.
pub trait Visitor {
    /// Called, at [`Level::Full`], with every member's bytes once they match
    /// their checksum; returns what is wrong with them, if anything (the
    /// `--decode` check of `bale verify` decodes images here).
    fn member(&mut self, key: &str, ext: &str, data: &[u8]) -> Option<String> {
        let _ = (key, ext, data);
        None
    }

    /// Called as the shard is read, with the number of shard-file bytes
    /// (compressed, for `.tar.zst`) read since the last call.
    fn progress(&mut self, bytes: u64) {
        let _ = bytes;
    }
}

impl Visitor for () {}

/// What [`check_shard`] found in one shard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardReport {
    /// The shard, as the manifest names it.
    pub shard: String,
    /// The problems, at most [`MAX_PROBLEMS_PER_SHARD`] (then one saying how many more).
    pub problems: Vec<Problem>,
    /// Problems found beyond the listed ones.
    pub omitted: u64,
    /// Samples whose members were checked (headers at `Quick`, bytes at `Full`).
    pub samples_checked: u64,
    /// Members checked.
    pub members_checked: u64,
    /// Bytes of the shard file read.
    pub bytes_read: u64,
    /// Whether the shard's index records member checksums (`None` when the
    /// index could not be read).
    pub member_checksums: Option<bool>,
}

impl ShardReport {
    fn push(&mut self, p: Problem) {
        if self.problems.len() < MAX_PROBLEMS_PER_SHARD {
            self.problems.push(p);
        } else {
            self.omitted += 1;
        }
    }

    fn finish(mut self) -> Self {
        if self.omitted > 0 {
            let n = self.omitted;
            self.problems.push(Problem::new(
                self.shard.clone(),
                format!("{n} more problems in this shard are not listed"),
            ));
        }
        self
    }

    /// Whether any listed problem is an error.
    pub fn has_errors(&self) -> bool {
        self.problems.iter().any(Problem::is_error)
    }
}

/// How tar member names are matched with index keys.
///
/// A leading `./` is always removed from tar names first (`bale index`
/// removes it; bale's own shards never have one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NameRules {
    /// Accept an index key `K~N` (`N` >= 2) for tar members named `K.EXT`:
    /// samples renamed by `bale index --rename-split`. Default `false`: names
    /// must match exactly.
    pub renamed_splits: bool,
}

impl NameRules {
    /// The rules for the dataset `m` describes: renamed splits are accepted
    /// when it was made by `bale index --rename-split` (`created_by.command`
    /// is `"index"` and `created_by.options.rename_split` is `true`).
    pub fn for_manifest(m: &Manifest) -> Self {
        NameRules {
            renamed_splits: m.created_by.command == "index"
                && m.created_by.options.get("rename_split") == Some(&serde_json::Value::Bool(true)),
        }
    }

    /// Whether the index key `index_key` names the sample whose tar members
    /// have the key `tar_key` (already without its leading `./`).
    ///
    /// ```
    /// use bale_format::verify::NameRules;
    /// let renamed = NameRules { renamed_splits: true };
    /// assert!(renamed.key_matches("a/b~2", "a/b"));
    /// assert!(!NameRules::default().key_matches("a/b~2", "a/b"));
    /// assert!(!renamed.key_matches("a/b~1", "a/b") && !renamed.key_matches("a/b~x", "a/b"));
    /// ```
    pub fn key_matches(&self, index_key: &str, tar_key: &str) -> bool {
        if index_key == tar_key {
            return true;
        }
        self.renamed_splits
            && index_key
                .strip_prefix(tar_key)
                .and_then(|rest| rest.strip_prefix('~'))
                .is_some_and(|n| {
                    !n.is_empty()
                        && !n.starts_with('0')
                        && n.bytes().all(|b| b.is_ascii_digit())
                        && n != "1"
                })
    }
}

/// Whether a dataset's indexes record member checksums (`"checksums"` in the
/// `--json` output of `bale verify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Checksums {
    /// Every index read records them (also when no index could be read).
    Present,
    /// No index records them: member bytes cannot be checked.
    Absent,
    /// Some indexes record them, others do not.
    Partial,
}

impl Checksums {
    /// Summarizes [`ShardReport::member_checksums`] over `reports`.
    pub fn of(reports: &[ShardReport]) -> Self {
        let known = || reports.iter().filter_map(|r| r.member_checksums);
        let with = known().filter(|&c| c).count();
        let without = known().filter(|&c| !c).count();
        match (with, without) {
            (_, 0) => Checksums::Present,
            (0, _) => Checksums::Absent,
            _ => Checksums::Partial,
        }
    }
}

/// The warning to list when indexes record no member checksums, or `None`
/// when every index read records them. It is about the dataset as a whole
/// (its `shard` is `bale.json`) and names the shards concerned when only some
/// lack checksums.
pub fn checksums_warning(reports: &[ShardReport]) -> Option<Problem> {
    let without: Vec<&str> = reports
        .iter()
        .filter(|r| r.member_checksums == Some(false))
        .map(|r| r.shard.as_str())
        .collect();
    let read = reports
        .iter()
        .filter(|r| r.member_checksums.is_some())
        .count();
    let which = match without.len() {
        0 => return None,
        1 if read == 1 => "the index of the dataset's shard records none".to_string(),
        n if n == read => format!("the indexes of all {n} shards record none"),
        n => {
            const SHOWN: usize = 3;
            let mut names = without[..n.min(SHOWN)].join(", ");
            if n > SHOWN {
                names.push_str(", ...");
            }
            format!("the indexes of {n} of {read} shards record none ({names})")
        }
    };
    Some(
        Problem::new(
            MANIFEST_NAME,
            format!(
                "member checksums are absent: {which}, so member bytes cannot be checked, only the tar \
                 structure (names, offsets, sizes) against the index; `bale index --checksum` records them"
            ),
        )
        .warning(),
    )
}

/// The byte offset an error names, if any.
fn error_offset(e: &FormatError) -> Option<u64> {
    match e {
        FormatError::IoAt { offset, .. }
        | FormatError::Corrupt { offset, .. }
        | FormatError::Tar { offset, .. } => Some(*offset),
        FormatError::Truncated { len, .. } => Some(*len),
        _ => None,
    }
}

/// Reads the manifest of the dataset in `dir` for checking.
///
/// A manifest that is not valid JSON, or whose totals disagree with its
/// shards, is a finding: it comes back as a problem (with the manifest parsed
/// as far as possible, so that the shards can still be checked).
///
/// # Errors
/// Only what is not a finding about a damaged dataset: `dir` cannot be read,
/// it holds no `bale.json` ([`FormatError::Incomplete`]), the file is not a
/// bale manifest, or it has an unsupported major version.
pub fn load_manifest(dir: &Path) -> Result<(Option<Manifest>, Vec<Problem>), FormatError> {
    let meta = std::fs::metadata(dir).map_err(|e| FormatError::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    if !meta.is_dir() {
        return Err(FormatError::Io {
            path: dir.to_path_buf(),
            source: io::Error::new(io::ErrorKind::NotADirectory, "not a dataset directory"),
        });
    }
    let path = Manifest::path_in(dir);
    let bytes = Manifest::read_bytes(dir)?;
    match Manifest::from_slice(&bytes, &path) {
        Ok(m) => Ok((Some(m), Vec::new())),
        Err(FormatError::Manifest { what, .. }) => {
            let problem = Problem::new(MANIFEST_NAME, format!("invalid manifest: {what}"));
            let lenient = serde_json::from_slice::<Manifest>(&bytes).ok();
            Ok((lenient, vec![problem]))
        }
        Err(e) => Err(e),
    }
}

/// Opens a shard for checking: a regular file only (a FIFO would block, a
/// device never end); the error says what it is instead.
fn open_shard(path: &Path) -> Result<File, String> {
    crate::files::open_regular(path).map_err(|e| match e {
        FormatError::NotRegular { kind, .. } => format!("it is {kind}, not a regular file"),
        FormatError::Io { source, .. } => source.to_string(),
        other => other.to_string(),
    })
}

/// File names that look like a shard or an index.
fn looks_like_shard(name: &str) -> bool {
    [".tar", ".tar.zst", ".idx", ".h5"]
        .iter()
        .any(|s| name.ends_with(s))
}

/// Checks the manifest against itself and the dataset directory: totals
/// (samples, bytes, per-extension counts) against the shard entries, shard
/// entries naming the same file twice, and files in the directory that look
/// like shards or indexes but are not listed (errors: "unknown shard") or are
/// leftover temporary files of an interrupted write (warnings).
///
/// Only the dataset directory is scanned (not its subdirectories, nor the
/// directories of shards it refers to elsewhere: other tars there are none
/// of its business). In a dataset written by `bale index`, whose directory
/// may hold the user's other tars, only unlisted `.idx` files are unknown.
pub fn check_manifest(dir: &Path, m: &Manifest) -> Vec<Problem> {
    let mut out = Vec::new();
    let samples: u64 = m.shards.iter().map(|s| s.samples).sum();
    if samples != m.samples {
        out.push(Problem::new(
            MANIFEST_NAME,
            format!(
                "manifest total samples is {}, its shards hold {samples}",
                m.samples
            ),
        ));
    }
    let bytes: u64 = m.shards.iter().map(|s| s.bytes).sum();
    if bytes != m.bytes {
        out.push(Problem::new(
            MANIFEST_NAME,
            format!(
                "manifest total bytes is {}, its shards hold {bytes}",
                m.bytes
            ),
        ));
    }
    let mut fields: BTreeMap<String, FieldStats> = BTreeMap::new();
    for s in &m.shards {
        for (k, v) in &s.fields {
            fields.entry(k.clone()).or_default().add(*v);
        }
    }
    if fields != m.fields {
        out.push(Problem::new(
            MANIFEST_NAME,
            format!(
                "manifest per-extension totals disagree with its shards: {}",
                describe_field_diff(&m.fields, &fields)
            ),
        ));
    }
    let mut known: BTreeSet<PathBuf> = BTreeSet::new();
    let dirs = [dir.to_path_buf()];
    let adopted = m.created_by.command == "index";
    for s in &m.shards {
        for f in [&s.file, &s.index] {
            let p = Manifest::resolve(dir, f);
            if !known.insert(p) {
                out.push(Problem::new(
                    f.clone(),
                    "the manifest lists this file twice",
                ));
            }
        }
    }
    for d in &dirs {
        let Ok(entries) = std::fs::read_dir(d) else {
            continue;
        };
        let mut names: Vec<(String, PathBuf)> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .collect();
        names.sort();
        for (name, path) in names {
            let shown = path
                .strip_prefix(dir)
                .map_or_else(|_| path.display().to_string(), |p| p.display().to_string());
            if name.starts_with(TEMP_PREFIX) {
                out.push(
                    Problem::new(
                        shown,
                        "leftover temporary file of an interrupted write (not part of the dataset; safe to delete)",
                    )
                    .warning(),
                );
            } else if looks_like_shard(&name)
                && !known.contains(&path)
                && (!adopted || name.ends_with(".idx"))
            {
                out.push(Problem::new(
                    shown,
                    "unknown shard: this file is not listed in the manifest",
                ));
            }
        }
    }
    out
}

fn describe_field_diff(
    recorded: &BTreeMap<String, FieldStats>,
    actual: &BTreeMap<String, FieldStats>,
) -> String {
    let exts: BTreeSet<&String> = recorded.keys().chain(actual.keys()).collect();
    let mut parts = Vec::new();
    for ext in exts {
        let r = recorded.get(ext).copied().unwrap_or_default();
        let a = actual.get(ext).copied().unwrap_or_default();
        if r != a {
            parts.push(format!(
                "{ext}: recorded {} members / {} bytes, actual {} / {}",
                r.count, r.bytes, a.count, a.bytes
            ));
        }
    }
    parts.join("; ")
}

/// Checks one shard and its index at `level` with the default [`NameRules`]
/// (tar names must match index keys exactly, after removing a leading `./`).
/// See [`check_shard_with`].
pub fn check_shard(
    dir: &Path,
    entry: &ShardEntry,
    level: Level,
    visitor: &mut dyn Visitor,
) -> ShardReport {
    check_shard_with(dir, entry, level, NameRules::default(), visitor)
}

/// Checks one shard and its index at `level`, matching tar names with index
/// keys by `rules` (pass [`NameRules::for_manifest`] of the dataset's
/// manifest); see the module docs for what each level covers. Never fails:
/// everything wrong is a [`Problem`] in the report.
pub fn check_shard_with(
    dir: &Path,
    entry: &ShardEntry,
    level: Level,
    rules: NameRules,
    visitor: &mut dyn Visitor,
) -> ShardReport {
    let mut r = ShardReport {
        shard: entry.file.clone(),
        ..ShardReport::default()
    };
    let name = entry.file.clone();
    let shard_path = Manifest::resolve(dir, &entry.file);
    let index_path = Manifest::resolve(dir, &entry.index);

    // The shard file: present, regular, of the recorded size.
    let shard_len = match std::fs::metadata(&shard_path) {
        Ok(m) if m.is_file() => Some(m.len()),
        Ok(_) => {
            r.push(Problem::new(&name, "shard is not a regular file"));
            None
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            r.push(Problem::new(&name, "shard file is missing"));
            None
        }
        Err(e) => {
            r.push(Problem::new(&name, format!("shard cannot be read: {e}")));
            None
        }
    };
    if let Some(len) = shard_len
        && len != entry.bytes
    {
        let how = if len < entry.bytes {
            "truncated"
        } else {
            "longer than recorded"
        };
        r.push(Problem::new(
            &name,
            format!(
                "shard is {how}: the file has {len} bytes, the manifest records {}",
                entry.bytes
            ),
        ));
    }

    // The index: readable, and agreeing with the manifest.
    let index = match ShardIndex::open(&index_path) {
        Ok(i) => Some(i),
        Err(FormatError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            r.push(Problem::new(
                &name,
                format!("index file {} is missing", entry.index),
            ));
            None
        }
        Err(e) => {
            let mut p = Problem::new(&name, format!("index {} is damaged: {e}", entry.index));
            if let Some(o) = error_offset(&e) {
                p = p.offset(o);
            }
            r.push(p);
            None
        }
    };
    if let Some(idx) = &index {
        r.member_checksums = Some(idx.has_checksums());
        check_index_against_manifest(&mut r, idx, entry, shard_len);
    }

    let Some(shard_len) = shard_len else {
        return r.finish();
    };
    if entry.compression == Compression::H5 || index.as_ref().is_some_and(ShardIndex::is_scattered)
    {
        check_scattered(&mut r, &shard_path, entry, index.as_ref(), level, visitor);
        return r.finish();
    }
    match level {
        Level::Quick => {
            if let Some(idx) = &index {
                quick_headers(&mut r, &shard_path, idx, shard_len, rules, visitor);
            }
        }
        Level::Full => full_pass(&mut r, &shard_path, entry, index.as_ref(), rules, visitor),
    }
    r.finish()
}

fn check_index_against_manifest(
    r: &mut ShardReport,
    idx: &ShardIndex,
    entry: &ShardEntry,
    shard_len: Option<u64>,
) {
    let name = entry.file.clone();
    let sum = hex64(idx.checksum());
    if sum != entry.index_xxh3 {
        r.push(Problem::new(
            &name,
            format!(
                "index checksum {sum} differs from the manifest's {} (the index was rewritten, or belongs to another dataset)",
                entry.index_xxh3
            ),
        ));
    }
    // Opening an index checks its structure and UTF-8, not the key syntax the
    // writers guarantee (that would double the cost of every open): check it here.
    for i in 0..idx.len() {
        if crate::name::key_is_valid_fast(idx.key(i).as_bytes()) {
            continue;
        }
        if let Err(e) = crate::name::validate_key(idx.key(i)) {
            r.push(Problem::new(&name, format!("index sample {i}: {e}")).key(idx.key(i)));
        }
    }
    let mut mismatch = |what: &str, index: u64, manifest: u64| {
        if index != manifest {
            r.push(Problem::new(
                &name,
                format!("index records {index} {what}, the manifest records {manifest}"),
            ));
        }
    };
    mismatch("samples", idx.len() as u64, entry.samples);
    mismatch("members", idx.member_count() as u64, entry.members);
    mismatch("shard bytes", idx.shard_len(), entry.bytes);
    mismatch("uncompressed tar bytes", idx.tar_len(), entry.tar_bytes);
    if idx.compression() != entry.compression {
        r.push(Problem::new(
            &name,
            format!(
                "index says compression {}, the manifest says {}",
                idx.compression().as_str(),
                entry.compression.as_str()
            ),
        ));
    }
    if let Some(len) = shard_len
        && len != idx.shard_len()
        && idx.shard_len() != entry.bytes
    {
        // (When the index agrees with the manifest, the size problem is already listed.)
        r.push(Problem::new(
            &name,
            format!(
                "shard file has {len} bytes, its index describes {}",
                idx.shard_len()
            ),
        ));
    }
    let mut fields: BTreeMap<String, FieldStats> = BTreeMap::new();
    for j in 0..idx.member_count() {
        let m = idx.member(j);
        let f = fields.entry(m.ext.to_owned()).or_default();
        f.count += 1;
        f.bytes += m.size;
    }
    if fields != entry.fields {
        r.push(Problem::new(
            &name,
            format!(
                "per-extension totals differ between manifest and index: {}",
                describe_field_diff(&entry.fields, &fields)
            ),
        ));
    }
}

/// A positioned reader over a file, from an offset on.
struct ReadAt<'a> {
    file: &'a File,
    pos: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = std::os::unix::fs::FileExt::read_at(self.file, buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Whether a tar entry is a member of some sample (a regular file whose
/// name, without a leading `./`, has an extension), as `bale index` and
/// [`SampleStream`] decide. A name that is not UTF-8 counts as a member:
/// neither skips it.
fn is_member(e: &crate::tar::Entry) -> bool {
    e.kind == EntryKind::File
        && e.name_str()
            .is_none_or(|n| split_member_name(normalize_member_name(n)).is_some())
}

/// Parses the tar entries in `bytes` (`len` bytes, which must end exactly
/// where the member's data starts): entries that belong to no sample are
/// stepped over, the first member's header must name `key`.`ext` (by `rules`)
/// and give `size`. Returns what is wrong, if anything.
fn check_header(
    bytes: impl Read,
    len: u64,
    key: &str,
    ext: &str,
    size: u64,
    rules: NameRules,
) -> Option<String> {
    let mut t = TarReader::new(bytes, "");
    let e = loop {
        match t.next_entry() {
            Ok(Some(e)) if is_member(&e) => break e,
            // A directory, link or file without extension: not the member's header.
            Ok(Some(_)) => {}
            Ok(None) => {
                return Some("end-of-archive block where the index puts a tar header".into());
            }
            Err(FormatError::Tar { what, .. }) => return Some(format!("bad tar header: {what}")),
            Err(FormatError::Truncated { .. }) => {
                return Some(
                    "the tar headers do not end where the index puts the member's data".into(),
                );
            }
            Err(e) => return Some(format!("tar header cannot be read: {e}")),
        }
    };
    let named = e
        .name_str()
        .map(normalize_member_name)
        .and_then(split_member_name)
        .is_some_and(|(k, x)| x == ext && rules.key_matches(key, k));
    if !named {
        Some(format!(
            "tar header names {:?}, the index says \"{key}.{ext}\"",
            String::from_utf8_lossy(&e.name)
        ))
    } else if e.size != size {
        Some(format!(
            "tar header gives size {}, the index says {size}",
            e.size
        ))
    } else if e.data_offset != len {
        Some("tar header does not end where the index puts the member's data".into())
    } else {
        None
    }
}

fn quick_headers(
    r: &mut ShardReport,
    path: &Path,
    idx: &ShardIndex,
    shard_len: u64,
    rules: NameRules,
    visitor: &mut dyn Visitor,
) {
    let name = r.shard.clone();
    let file = match open_shard(path) {
        Ok(f) => f,
        Err(e) => {
            r.push(Problem::new(&name, format!("shard cannot be opened: {e}")));
            return;
        }
    };
    let compressed = idx.compression() == Compression::Zstd;
    for i in 0..idx.len() {
        let e = idx.sample(i);
        let key = idx.key(i);
        if e.file_offset.saturating_add(e.file_len) > shard_len {
            let left = idx.len() - i;
            r.push(
                Problem::new(
                    &name,
                    format!("the shard ends before this sample: {left} samples from here on lie past its end"),
                )
                .key(key)
                .offset(e.file_offset),
            );
            return;
        }
        // For a compressed shard, the sample's tar bytes; else read per member.
        let buf = if compressed {
            match read_sample(&file, path, Compression::Zstd, &e) {
                Ok(b) => Some(b),
                Err(err) => {
                    r.push(
                        Problem::new(&name, format!("sample does not decompress: {err}"))
                            .key(key)
                            .offset(e.file_offset),
                    );
                    continue;
                }
            }
        } else {
            None
        };
        let mut start = e.tar_offset;
        let mut read = 0u64;
        for m in idx.members(i) {
            if m.offset < start {
                r.push(
                    Problem::new(&name, "member overlaps the previous one")
                        .key(key)
                        .member(m.ext)
                        .offset(m.offset),
                );
                break;
            }
            let len = m.offset - start;
            let found = match &buf {
                Some(b) => {
                    let a = (start - b.tar_offset) as usize;
                    let z = (m.offset - b.tar_offset) as usize;
                    b.data
                        .get(a..z)
                        .map(|region| check_header(region, len, key, m.ext, m.size, rules))
                }
                None => {
                    // Usually one read of the member's header(s); entries stepped
                    // over (a directory, a file without extension) are read through.
                    let at = ReadAt {
                        file: &file,
                        pos: start,
                    }
                    .take(len);
                    let reader = BufReader::with_capacity(len.clamp(1, 1 << 16) as usize, at);
                    Some(check_header(reader, len, key, m.ext, m.size, rules))
                }
            };
            let Some(found) = found else {
                r.push(
                    Problem::new(&name, "tar header cannot be read")
                        .key(key)
                        .member(m.ext)
                        .offset(start),
                );
                break;
            };
            read += len;
            if let Some(what) = found {
                r.push(
                    Problem::new(&name, what)
                        .key(key)
                        .member(m.ext)
                        .offset(start),
                );
            }
            r.members_checked += 1;
            start = m.offset + crate::tar::padded(m.size);
        }
        r.samples_checked += 1;
        let n = if compressed { e.file_len } else { read };
        r.bytes_read += n;
        visitor.progress(n);
    }
    // The end-of-archive blocks of a plain tar.
    if !compressed && idx.tar_len() >= 1024 {
        match read_exact_at(&file, path, idx.tar_len() - 1024, 1024) {
            Ok(b) if b.iter().all(|&x| x == 0) => {}
            Ok(_) => r.push(
                Problem::new(&name, "the tar does not end with two zero blocks")
                    .offset(idx.tar_len() - 1024),
            ),
            Err(err) => r.push(Problem::new(
                &name,
                format!("the tar's end cannot be read: {err}"),
            )),
        }
    }
}

/// A reader that hashes and counts what passes through it.
struct Hashing<R> {
    inner: R,
    hasher: Rc<RefCell<Xxh3>>,
    pos: Rc<Cell<u64>>,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.borrow_mut().update(&buf[..n]);
        self.pos.set(self.pos.get() + n as u64);
        Ok(n)
    }
}

/// The index position of the tar's sample `key` found out of order: the
/// sample of that key, or with `rules.renamed_splits` the first renamed run
/// (`key~2`, `key~3`, ...) not yet seen when that one was.
fn locate(idx: &ShardIndex, key: &str, seen: &[bool], rules: NameRules) -> Option<usize> {
    let first = idx.find(key);
    if rules.renamed_splits && first.is_none_or(|j| seen[j]) {
        for n in 2u64.. {
            match idx.find(&format!("{key}~{n}")) {
                Some(j) if !seen[j] => return Some(j),
                Some(_) => {}
                None => break,
            }
        }
    }
    first
}

fn full_pass(
    r: &mut ShardReport,
    path: &Path,
    entry: &ShardEntry,
    idx: Option<&ShardIndex>,
    rules: NameRules,
    visitor: &mut dyn Visitor,
) {
    let name = r.shard.clone();
    let file = match open_shard(path) {
        Ok(f) => f,
        Err(e) => {
            r.push(Problem::new(&name, format!("shard cannot be opened: {e}")));
            return;
        }
    };
    let hasher = Rc::new(RefCell::new(Xxh3::new()));
    let pos = Rc::new(Cell::new(0u64));
    let hashing = Hashing {
        inner: file,
        hasher: Rc::clone(&hasher),
        pos: Rc::clone(&pos),
    };
    let buffered = BufReader::with_capacity(STREAM_BUFFER, hashing);
    let reader: Box<dyn Read> = match entry.compression {
        Compression::None => Box::new(buffered),
        Compression::Zstd => match zstd::stream::read::Decoder::with_buffer(buffered) {
            Ok(d) => Box::new(BufReader::with_capacity(STREAM_BUFFER, d)),
            Err(e) => {
                r.push(Problem::new(
                    &name,
                    format!("zstd decoder cannot start: {e}"),
                ));
                return;
            }
        },
        Compression::H5 => {
            r.push(Problem::new(&name, "an HDF5 shard is not a tar stream"));
            return;
        }
    };
    let mut stream = SampleStream::new(reader, path).strip_dot_slash(true);
    let n = idx.map_or(0, ShardIndex::len);
    let mut seen = vec![false; n];
    let mut next = 0usize;
    let mut reported = 0u64;
    let mut failed_at: Option<u64> = None;
    loop {
        let s = match stream.next_sample() {
            Ok(Some(s)) => s,
            Ok(None) => break,
            Err(e) => {
                let mut p = Problem::new(&name, format!("tar stream cannot be read: {e}"));
                if let Some(o) = error_offset(&e) {
                    p = p.offset(o);
                }
                r.push(p);
                failed_at = Some(error_offset(&e).unwrap_or(0));
                break;
            }
        };
        let delta = pos.get() - reported;
        reported = pos.get();
        r.bytes_read += delta;
        visitor.progress(delta);
        r.samples_checked += 1;
        r.members_checked += s.members.len() as u64;
        let Some(idx) = idx else {
            // No index to compare with: the structure was parsed, members read.
            for m in &s.members {
                if let Some(what) = visitor.member(&s.key, &m.ext, &m.data) {
                    r.push(
                        Problem::new(&name, what)
                            .key(&s.key)
                            .member(&m.ext)
                            .offset(m.offset),
                    );
                }
            }
            continue;
        };
        let i = if next < n && rules.key_matches(idx.key(next), &s.key) {
            next
        } else {
            match locate(idx, &s.key, &seen, rules) {
                Some(j) => {
                    r.push(
                        Problem::new(
                            &name,
                            format!("sample is out of order: the index lists it as sample {j}, the tar has it at position {next}"),
                        )
                        .key(&s.key)
                        .offset(s.tar_offset),
                    );
                    j
                }
                None => {
                    r.push(
                        Problem::new(&name, "the tar holds a sample the index does not list")
                            .key(&s.key)
                            .offset(s.tar_offset),
                    );
                    continue;
                }
            }
        };
        if seen[i] {
            r.push(
                Problem::new(&name, "the sample appears twice in the tar")
                    .key(&s.key)
                    .offset(s.tar_offset),
            );
            continue;
        }
        seen[i] = true;
        next = i + 1;
        // Problems from here on name the sample by its index key (`K~2` for a renamed run).
        let key = idx.key(i);
        let e = idx.sample(i);
        if s.tar_offset != e.tar_offset {
            r.push(
                Problem::new(
                    &name,
                    format!(
                        "sample starts at tar offset {}, the index says {}",
                        s.tar_offset, e.tar_offset
                    ),
                )
                .key(key)
                .offset(s.tar_offset),
            );
        } else if s.tar_end != e.tar_offset + e.tar_len {
            r.push(
                Problem::new(
                    &name,
                    format!(
                        "sample ends at tar offset {}, the index says {}",
                        s.tar_end,
                        e.tar_offset + e.tar_len
                    ),
                )
                .key(key)
                .offset(s.tar_offset),
            );
        }
        let members: Vec<_> = idx.members(i).collect();
        if members.len() != s.members.len() {
            let want: Vec<&str> = members.iter().map(|m| m.ext).collect();
            let got: Vec<&str> = s.members.iter().map(|m| m.ext.as_str()).collect();
            r.push(
                Problem::new(
                    &name,
                    format!("the tar has members {got:?}, the index lists {want:?}"),
                )
                .key(key)
                .offset(s.tar_offset),
            );
        }
        for (m, sm) in members.iter().zip(&s.members) {
            let p = |what: String| {
                Problem::new(&name, what)
                    .key(key)
                    .member(m.ext)
                    .offset(sm.offset)
            };
            if sm.ext != m.ext {
                r.push(p(format!(
                    "tar member is {:?}, the index says {:?}",
                    sm.ext, m.ext
                )));
                continue;
            }
            if sm.offset != m.offset {
                r.push(p(format!(
                    "data at tar offset {}, the index says {}",
                    sm.offset, m.offset
                )));
            }
            if sm.data.len() as u64 != m.size {
                r.push(p(format!(
                    "tar member has {} bytes, the index says {}",
                    sm.data.len(),
                    m.size
                )));
                continue;
            }
            if idx.has_checksums() {
                let actual = checksum(&sm.data);
                if actual != m.checksum {
                    r.push(p(format!(
                        "checksum mismatch: the index records {}, the data hashes to {}",
                        hex64(m.checksum),
                        hex64(actual)
                    )));
                    continue;
                }
            }
            if let Some(what) = visitor.member(key, &sm.ext, &sm.data) {
                r.push(p(what));
            }
        }
    }
    drop(stream);
    if let Some(idx) = idx {
        let missing: Vec<usize> = (0..n).filter(|&i| !seen[i]).collect();
        if let Some(at) = failed_at {
            if !missing.is_empty() {
                r.push(
                    Problem::new(
                        &name,
                        format!(
                            "{} samples listed in the index were not checked: the tar cannot be read past offset {at}",
                            missing.len()
                        ),
                    )
                    .key(idx.key(missing[0])),
                );
            }
        } else {
            for i in missing {
                r.push(
                    Problem::new(&name, "sample listed in the index is missing from the tar")
                        .key(idx.key(i))
                        .offset(idx.sample(i).tar_offset),
                );
            }
        }
    }
    // Hash the rest of the file (end blocks and anything read-ahead missed).
    let consumed = pos.get();
    let rest = (|| -> io::Result<u64> {
        let mut f = open_shard(path).map_err(io::Error::other)?;
        f.seek(SeekFrom::Start(consumed))?;
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        loop {
            let k = f.read(&mut buf)?;
            if k == 0 {
                return Ok(total);
            }
            hasher.borrow_mut().update(&buf[..k]);
            total += k as u64;
        }
    })();
    match rest {
        Ok(k) => {
            let delta = consumed + k - reported;
            r.bytes_read += delta;
            visitor.progress(delta);
        }
        Err(e) => {
            r.push(Problem::new(
                &name,
                format!("shard cannot be read to its end: {e}"),
            ));
            return;
        }
    }
    if let Some(want) = &entry.shard_xxh3 {
        let got = hex64(hasher.borrow().digest());
        if &got != want {
            r.push(Problem::new(
                &name,
                format!(
                    "shard checksum mismatch: the manifest records {want}, the file hashes to {got}"
                ),
            ));
        }
    }
}

/// A scattered index of a plain tar (`bale index --allow-split`): scans the
/// tar's headers again, regrouping split samples as the index did, and checks
/// that they give the index's samples (keys, in order) and members
/// (extension, data offset, size).
fn check_regrouped_tar(
    r: &mut ShardReport,
    path: &Path,
    idx: &ShardIndex,
    visitor: &mut dyn Visitor,
) {
    use crate::scan::{ScanOptions, SplitPolicy, scan_shard};
    let name = r.shard.clone();
    let opts = ScanOptions {
        checksums: false,
        split: SplitPolicy::Regroup,
    };
    let scanned = match scan_shard(path, &opts) {
        Ok(s) => s,
        Err(e) => {
            let mut p = Problem::new(&name, format!("tar headers cannot be read: {e}"));
            if let Some(o) = error_offset(&e) {
                p = p.offset(o);
            }
            r.push(p);
            return;
        }
    };
    r.bytes_read += scanned.stats.bytes_read;
    visitor.progress(scanned.stats.bytes_read);
    let tar = match ShardIndex::from_bytes(scanned.index_bytes(), path) {
        Ok(t) => t,
        Err(e) => {
            r.push(Problem::new(
                &name,
                format!("tar headers give no valid index: {e}"),
            ));
            return;
        }
    };
    if tar.len() != idx.len() {
        r.push(Problem::new(
            &name,
            format!(
                "the tar's headers give {} samples (split samples regrouped), the index lists {}",
                tar.len(),
                idx.len()
            ),
        ));
    }
    for i in 0..tar.len().min(idx.len()) {
        let key = idx.key(i);
        if tar.key(i) != key {
            r.push(
                Problem::new(
                    &name,
                    format!(
                        "index sample {i} is {key:?}, the tar's headers give {:?} there",
                        tar.key(i)
                    ),
                )
                .key(key),
            );
            continue;
        }
        let want: Vec<(&str, u64, u64)> =
            idx.members(i).map(|m| (m.ext, m.offset, m.size)).collect();
        let got: Vec<(&str, u64, u64)> =
            tar.members(i).map(|m| (m.ext, m.offset, m.size)).collect();
        if want != got {
            r.push(
                Problem::new(
                    &name,
                    format!(
                        "members (extension, offset, size) differ: the index lists {want:?}, the tar's headers give {got:?}"
                    ),
                )
                .key(key),
            );
        }
    }
}

/// The HDF5 file signature, at offset 0 of every `.h5` shard bale writes.
const HDF5_SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

/// Checks a shard whose index is scattered: at `Quick`, the HDF5 signature
/// (HDF5 shards) or the tar's headers against the index (plain tars whose
/// split samples `bale index --allow-split` regrouped); at `Full`, also the
/// whole file against the manifest's checksum and every member's bytes, read
/// at its offset, against its checksum in the index.
fn check_scattered(
    r: &mut ShardReport,
    path: &Path,
    entry: &ShardEntry,
    idx: Option<&ShardIndex>,
    level: Level,
    visitor: &mut dyn Visitor,
) {
    let name = r.shard.clone();
    let mut file = match open_shard(path) {
        Ok(f) => f,
        Err(e) => {
            r.push(Problem::new(&name, format!("shard cannot be opened: {e}")));
            return;
        }
    };
    let mut sig = [0u8; 8];
    if entry.compression == Compression::H5
        && (file.read_exact(&mut sig).is_err() || &sig != HDF5_SIGNATURE)
    {
        r.push(Problem::new(&name, "shard does not start with the HDF5 signature").offset(0));
    }
    if entry.compression == Compression::None
        && let Some(idx) = idx
    {
        check_regrouped_tar(r, path, idx, visitor);
    }
    if level == Level::Quick {
        return;
    }
    if let Some(want) = &entry.shard_xxh3 {
        let mut hasher = Xxh3::new();
        let mut buf = vec![0u8; STREAM_BUFFER];
        let mut at = 0u64;
        let read = loop {
            match std::os::unix::fs::FileExt::read_at(&file, &mut buf, at) {
                Ok(0) => break Ok(()),
                Ok(k) => {
                    hasher.update(&buf[..k]);
                    at += k as u64;
                    r.bytes_read += k as u64;
                    visitor.progress(k as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        if let Err(e) = read {
            r.push(Problem::new(&name, format!("shard cannot be read: {e}")).offset(at));
        }
        let got = hex64(hasher.digest());
        if &got != want {
            r.push(Problem::new(
                &name,
                format!(
                    "shard checksum mismatch: the manifest records {want}, the file hashes to {got}"
                ),
            ));
        }
    }
    let Some(idx) = idx else { return };
    for i in 0..idx.len() {
        let key = idx.key(i);
        r.samples_checked += 1;
        for m in idx.members(i) {
            r.members_checked += 1;
            let data = match crate::read::read_member(&file, path, &m) {
                Ok(d) => d,
                Err(e) => {
                    r.push(
                        Problem::new(&name, format!("member cannot be read: {e}"))
                            .key(key)
                            .member(m.ext)
                            .offset(m.offset),
                    );
                    continue;
                }
            };
            if idx.has_checksums() && checksum(&data) != m.checksum {
                r.push(
                    Problem::new(
                        &name,
                        format!(
                            "member bytes do not match the index checksum {:016x}",
                            m.checksum
                        ),
                    )
                    .key(key)
                    .member(m.ext)
                    .offset(m.offset),
                );
                continue;
            }
            if let Some(what) = visitor.member(key, m.ext, &data) {
                r.push(
                    Problem::new(&name, what)
                        .key(key)
                        .member(m.ext)
                        .offset(m.offset),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CreatedBy, Member, ShardFileWriter};

    fn dataset(dir: &Path, compression: Compression) -> Manifest {
        // A fresh dataset each time: writers never replace files.
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let mut shards = Vec::new();
        for s in 0..2u64 {
            let name = crate::shard_file_name("shard", s, compression);
            let mut w = ShardFileWriter::create(dir, &name, compression, 0).unwrap();
            for i in 0..5u64 {
                let key = format!("c{}/{:04}", i % 2, s * 10 + i);
                let data = vec![(i * 31 + s) as u8; 700 + i as usize * 100];
                let cls = (i % 2).to_string();
                w.writer()
                    .write_sample(
                        &key,
                        &[
                            Member {
                                ext: "jpg",
                                data: &data,
                            },
                            Member {
                                ext: "cls",
                                data: cls.as_bytes(),
                            },
                        ],
                    )
                    .unwrap();
            }
            shards.push(w.finish().unwrap());
        }
        let created_by = CreatedBy {
            tool: "bale".into(),
            version: "0".into(),
            command: "test".into(),
            options: serde_json::Value::Null,
        };
        let m = Manifest::new(shards, Some(vec!["c0".into(), "c1".into()]), created_by);
        m.write(dir).unwrap();
        m
    }

    fn all(dir: &Path, level: Level) -> Vec<Problem> {
        let (m, mut p) = load_manifest(dir).unwrap();
        let m = m.unwrap();
        p.extend(check_manifest(dir, &m));
        for s in &m.shards {
            p.extend(check_shard(dir, s, level, &mut ()).problems);
        }
        p
    }

    #[test]
    fn clean_datasets_have_no_problems() {
        for c in [Compression::None, Compression::Zstd] {
            let dir = tempfile::tempdir().unwrap();
            let m = dataset(dir.path(), c);
            for level in [Level::Quick, Level::Full] {
                assert_eq!(all(dir.path(), level), vec![], "{c:?} {level:?}");
                let r = check_shard(dir.path(), &m.shards[0], level, &mut ());
                assert_eq!(r.samples_checked, 5);
                assert_eq!(r.members_checked, 10);
            }
            let r = check_shard(dir.path(), &m.shards[0], Level::Full, &mut ());
            assert_eq!(r.bytes_read, m.shards[0].bytes);
        }
    }

    #[test]
    fn invalid_keys_in_an_index_are_found_by_verify_not_by_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = dataset(dir.path(), Compression::None);
        let idx_path = dir.path().join(&m.shards[0].index);
        let mut b = std::fs::read(&idx_path).unwrap();
        let at = b
            .windows(7)
            .position(|w| w == b"c0/0000")
            .expect("key in the string table");
        b[at..at + 7].copy_from_slice(b"../0000");
        let body = b.len() - 8;
        let sum = crate::hash::xxh3_64(&b[..body]);
        b[body..].copy_from_slice(&sum.to_le_bytes());
        std::fs::write(&idx_path, &b).unwrap();
        m.shards[0].index_xxh3 = hex64(sum);
        std::fs::remove_file(Manifest::path_in(dir.path())).unwrap();
        m.write(dir.path()).unwrap();
        // Opening stays cheap: it checks structure, not key syntax.
        let idx = ShardIndex::open(&idx_path).unwrap();
        assert_eq!(idx.key(0), "../0000");
        for level in [Level::Quick, Level::Full] {
            let p = all(dir.path(), level);
            assert!(
                p.iter()
                    .any(|p| p.what.contains("index sample 0") && p.what.contains("'..'")),
                "{level:?}: {p:?}"
            );
        }
    }

    #[test]
    fn flipped_member_bit_is_named_at_full_level_only() {
        let dir = tempfile::tempdir().unwrap();
        let m = dataset(dir.path(), Compression::None);
        let idx = ShardIndex::open(dir.path().join(&m.shards[1].index)).unwrap();
        let mem = idx.members(2).next().unwrap();
        let path = dir.path().join(&m.shards[1].file);
        let mut b = std::fs::read(&path).unwrap();
        b[mem.offset as usize + 3] ^= 0x10;
        std::fs::write(&path, b).unwrap();
        let p = all(dir.path(), Level::Full);
        let hit = p
            .iter()
            .find(|p| p.key.is_some())
            .expect("a member problem");
        assert_eq!(hit.shard, "shard-000001.tar");
        assert_eq!(hit.key.as_deref(), Some(idx.key(2)));
        assert_eq!(hit.member.as_deref(), Some("jpg"));
        assert!(hit.what.contains("checksum mismatch"), "{hit}");
        assert!(
            p.iter().any(|p| p.what.contains("shard checksum mismatch")),
            "{p:?}"
        );
        assert_eq!(all(dir.path(), Level::Quick), vec![]);
    }

    #[test]
    fn flipped_header_bit_is_found_by_quick() {
        for c in [Compression::None, Compression::Zstd] {
            let dir = tempfile::tempdir().unwrap();
            let m = dataset(dir.path(), c);
            if c == Compression::Zstd {
                // Damage inside a frame: the frame no longer decompresses to the same tar.
                let path = dir.path().join(&m.shards[0].file);
                let mut b = std::fs::read(&path).unwrap();
                b[20] ^= 0xff;
                std::fs::write(&path, b).unwrap();
                assert!(!all(dir.path(), Level::Quick).is_empty());
                assert!(!all(dir.path(), Level::Full).is_empty());
                continue;
            }
            let path = dir.path().join(&m.shards[0].file);
            let mut b = std::fs::read(&path).unwrap();
            b[3] ^= 1; // the first header's name
            std::fs::write(&path, b).unwrap();
            let p = all(dir.path(), Level::Quick);
            assert!(
                p.iter()
                    .any(|p| p.what.contains("tar header") && p.offset == Some(0)),
                "{p:?}"
            );
            let p = all(dir.path(), Level::Full);
            assert!(p.iter().any(|p| p.what.contains("tar stream")), "{p:?}");
        }
    }

    #[test]
    fn missing_truncated_and_unknown_files() {
        let dir = tempfile::tempdir().unwrap();
        let m = dataset(dir.path(), Compression::None);
        std::fs::remove_file(dir.path().join(&m.shards[0].file)).unwrap();
        let p1 = dir.path().join(&m.shards[1].file);
        let len = std::fs::metadata(&p1).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p1)
            .unwrap()
            .set_len(len - 700)
            .unwrap();
        std::fs::write(dir.path().join("shard-000009.tar"), b"x").unwrap();
        std::fs::write(
            dir.path().join(format!("{TEMP_PREFIX}1-shard-000002.tar")),
            b"x",
        )
        .unwrap();
        for level in [Level::Quick, Level::Full] {
            let p = all(dir.path(), level);
            let text: Vec<String> = p.iter().map(ToString::to_string).collect();
            assert!(
                text.iter()
                    .any(|t| t == "shard-000000.tar: shard file is missing"),
                "{text:?}"
            );
            assert!(
                text.iter()
                    .any(|t| t.starts_with("shard-000001.tar: shard is truncated")),
                "{text:?}"
            );
            assert!(
                text.iter()
                    .any(|t| t.starts_with("shard-000009.tar: unknown shard")),
                "{text:?}"
            );
            let w = p.iter().find(|p| p.severity == Severity::Warning).unwrap();
            assert!(w.what.contains("temporary"), "{w}");
        }
    }

    #[test]
    fn manifest_count_off_by_one_is_a_finding() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = dataset(dir.path(), Compression::None);
        m.samples += 1;
        std::fs::write(dir.path().join(MANIFEST_NAME), m.to_bytes()).unwrap();
        let p = all(dir.path(), Level::Full);
        assert!(
            p.iter()
                .any(|p| p.shard == MANIFEST_NAME && p.what.contains("samples is 11")),
            "{p:?}"
        );
        // Off by one in a shard entry (totals kept consistent): the index disagrees.
        let mut m = dataset(dir.path(), Compression::None);
        m.shards[1].samples -= 1;
        m.samples -= 1;
        std::fs::remove_file(Manifest::path_in(dir.path())).unwrap();
        m.write(dir.path()).unwrap();
        let p = all(dir.path(), Level::Quick);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(
            p[0].to_string(),
            "shard-000001.tar: index records 5 samples, the manifest records 4"
        );
    }

    #[test]
    fn flipped_index_bit_and_not_a_dataset() {
        let dir = tempfile::tempdir().unwrap();
        let m = dataset(dir.path(), Compression::None);
        let path = dir.path().join(&m.shards[0].index);
        let mut b = std::fs::read(&path).unwrap();
        b[70] ^= 4;
        std::fs::write(&path, b).unwrap();
        let p = all(dir.path(), Level::Quick);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].what.starts_with("index shard-000000.idx is damaged")
                && p[0].what.contains("checksum mismatch")
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            load_manifest(empty.path()),
            Err(FormatError::Incomplete { .. })
        ));
        assert!(load_manifest(&empty.path().join("nope")).is_err());
    }

    #[test]
    fn checksums_summary_and_warning() {
        let report = |shard: &str, sums: Option<bool>| ShardReport {
            shard: shard.into(),
            member_checksums: sums,
            ..ShardReport::default()
        };
        let all = [report("a.tar", Some(true)), report("b.tar", None)];
        assert_eq!(Checksums::of(&all), Checksums::Present);
        assert_eq!(checksums_warning(&all), None);
        let none = [report("a.tar", Some(false)), report("b.tar", Some(false))];
        assert_eq!(Checksums::of(&none), Checksums::Absent);
        let w = checksums_warning(&none).unwrap();
        assert_eq!(
            (w.shard.as_str(), w.severity),
            (MANIFEST_NAME, Severity::Warning)
        );
        assert!(w.what.contains("all 2 shards record none"), "{w}");
        let some: Vec<ShardReport> = (0..6)
            .map(|i| report(&format!("s{i}.tar"), Some(i % 3 == 0)))
            .collect();
        assert_eq!(Checksums::of(&some), Checksums::Partial);
        let w = checksums_warning(&some).unwrap();
        assert!(
            w.what
                .contains("the indexes of 4 of 6 shards record none (s1.tar, s2.tar, s4.tar, ...)"),
            "{w}"
        );
        // The pack fixture's indexes record checksums: no warning, and the report says so.
        let dir = tempfile::tempdir().unwrap();
        let m = dataset(dir.path(), Compression::None);
        let r = check_shard(dir.path(), &m.shards[0], Level::Quick, &mut ());
        assert_eq!(r.member_checksums, Some(true));
    }

    #[test]
    fn name_rules_follow_the_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = dataset(dir.path(), Compression::None);
        assert!(!NameRules::for_manifest(&m).renamed_splits);
        m.created_by.command = "index".into();
        m.created_by.options = serde_json::json!({ "rename_split": true });
        assert!(NameRules::for_manifest(&m).renamed_splits);
        m.created_by.command = "pack".into();
        assert!(!NameRules::for_manifest(&m).renamed_splits);
        let r = NameRules {
            renamed_splits: true,
        };
        assert!(r.key_matches("a", "a") && r.key_matches("a~10", "a"));
        assert!(
            !r.key_matches("a~02", "a") && !r.key_matches("a~", "a") && !r.key_matches("ab~2", "a")
        );
    }

    #[test]
    fn visitor_sees_every_member_and_progress_sums_to_the_file() {
        struct V(u64, Vec<String>);
        impl Visitor for V {
            fn member(&mut self, key: &str, ext: &str, _: &[u8]) -> Option<String> {
                self.1.push(format!("{key}.{ext}"));
                (ext == "cls" && key.ends_with("0003")).then(|| "bad label".to_string())
            }
            fn progress(&mut self, bytes: u64) {
                self.0 += bytes;
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let m = dataset(dir.path(), Compression::Zstd);
        let mut v = V(0, Vec::new());
        let r = check_shard(dir.path(), &m.shards[0], Level::Full, &mut v);
        assert_eq!(v.0, m.shards[0].bytes);
        assert_eq!(v.1.len(), 10);
        assert_eq!(r.problems.len(), 1);
        assert_eq!(
            r.problems[0]
                .to_string()
                .split(" at offset")
                .next()
                .unwrap(),
            "shard-000000.tar.zst: key \"c1/0003\" member \"cls\""
        );
    }
}
