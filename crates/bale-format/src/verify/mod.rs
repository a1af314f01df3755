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
use std::io::{self, BufReader, Read};
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

mod full;
mod manifest;
mod quick;
mod scattered;
#[cfg(test)]
mod tests;

use full::*;
use manifest::*;
pub use manifest::{MAX_DUPLICATE_KEYS, check_keys, check_manifest, load_manifest};
use quick::*;
use scattered::*;

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
        // Names come from a manifest and a tar: shown escaped.
        write!(f, "{}", crate::shown(Path::new(&self.shard)))?;
        if let Some(k) = &self.key {
            write!(f, ": key {k:?}")?;
        }
        if let Some(m) = &self.member {
            write!(f, " member {m:?}")?;
        }
        if let Some(o) = self.offset {
            write!(f, " at offset {o}")?;
        }
        write!(f, ": {}", crate::shown(Path::new(&self.what)))
    }
}

/// What is wrong with a member's bytes whatever the visitor checks: a
/// `.cls` member that no reader can parse as a label
/// ([`crate::parse_label`]).
pub(crate) fn member_problem(ext: &str, data: &[u8]) -> Option<String> {
    (ext == "cls" && crate::name::parse_label(data).is_none()).then(|| {
        format!(
            "a .cls member that is not a decimal integer label ({:?}): every reader refuses it",
            String::from_utf8_lossy(&data[..data.len().min(64)])
        )
    })
}

/// Problems of the samples of `idx` that the index alone shows: members
/// under names the readers reserve ([`crate::is_reserved_ext`]).
fn check_member_names(r: &mut ShardReport, idx: &ShardIndex) {
    let name = r.shard.clone();
    for i in 0..idx.len() {
        idx.release_behind(i);
        for m in idx.members(i) {
            if crate::name::is_reserved_ext(m.ext) {
                r.push(
                    Problem::new(
                        &name,
                        format!(
                            "member name .{} is reserved for a field readers add; a reader ignores it",
                            m.ext
                        ),
                    )
                    .key(idx.key(i))
                    .member(m.ext),
                );
            }
        }
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

/// Opens a shard for checking, or lists why it cannot be opened.
fn open_or_report(r: &mut ShardReport, path: &Path) -> Option<Box<dyn crate::read_at::ReadAt>> {
    match open_shard(path) {
        Ok(f) => Some(f),
        Err(e) => {
            r.push(Problem::new(
                r.shard.clone(),
                format!("shard cannot be opened: {e}"),
            ));
            None
        }
    }
}

/// Opens a shard for checking: a regular file only (a FIFO would block, a
/// device never end); the error says what it is instead.
fn open_shard(path: &Path) -> Result<Box<dyn crate::read_at::ReadAt>, String> {
    crate::read_at::open(path)
        .map(|(src, _)| src)
        .map_err(|e| match e {
            FormatError::NotRegular { kind, .. } => format!("it is {kind}, not a regular file"),
            FormatError::Io { source, .. } => source.to_string(),
            other => other.to_string(),
        })
}

/// The length of the object at a URL (`Err(len)`: no local metadata), or
/// the error opening it.
fn url_len(path: &Path) -> io::Result<Result<std::fs::Metadata, u64>> {
    match crate::read_at::open(path) {
        Ok((_, len)) => Ok(Err(len)),
        Err(FormatError::Io { source, .. }) => Err(source),
        Err(e) => Err(io::Error::other(e.to_string())),
    }
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
    let shard_meta = if crate::read_at::is_url(&shard_path) {
        url_len(&shard_path)
    } else {
        std::fs::metadata(&shard_path).map(Ok)
    };
    let shard_len = match shard_meta {
        Ok(Err(len)) => Some(len),
        Ok(Ok(m)) if m.is_file() => Some(m.len()),
        Ok(Ok(m)) => {
            r.push(Problem::new(
                &name,
                format!("shard is {}, not a regular file", crate::files::kind_of(&m)),
            ));
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
        check_member_names(&mut r, idx);
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
