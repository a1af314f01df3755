//! Other tools' datasets that `bale convert` reads: MosaicML Streaming (MDS)
//! and LitData's optimized datasets, straight from their `index.json` and
//! shard files, without Python.
//!
//! Both tools lay out a shard the same way: a little-endian u32 sample
//! count `n`, `n + 1` u32 offsets from the start of the file, then the
//! samples (MDS puts its JSON config between the offsets and the first
//! sample). A sample is a u32 size for each variable-size column, then the
//! columns' bytes in column order. Each column becomes a member named after
//! the column ([`values`] has the mapping); a sample's key is its number in
//! the dataset, zero-padded.
//!
//! Everything read is untrusted: `index.json` is capped at 64 MiB, shard
//! names must stay inside the dataset directory, shards are opened as
//! regular files only, and every count, offset and size is checked against
//! the bytes that are there before anything is allocated for it.
//!
//! ```no_run
//! use bale_format::foreign::ForeignDataset;
//! let ds = ForeignDataset::open("mds-dataset".as_ref())?;
//! ds.for_each(&|| false, |key, members| {
//!     println!("{key}: {} members", members.len());
//!     Ok::<_, bale_format::FormatError>(())
//! })?;
//! # Ok::<(), bale_format::FormatError>(())
//! ```

mod litdata;
mod mds;
mod shard;
mod values;

use std::path::{Component, Path, PathBuf};

use serde_json::Value as Json;

use crate::error::{FormatError, Result};

/// The index file of both tools.
pub const INDEX_NAME: &str = "index.json";

/// Largest `index.json` read (as the manifest).
pub const MAX_INDEX_BYTES: u64 = crate::MAX_MANIFEST_BYTES;

/// Most samples one shard may hold: its offset table is held in memory
/// (4 bytes a sample).
pub const MAX_SHARD_SAMPLES: u64 = 1 << 24;

/// The most bytes of one stored sample bale reads from an MDS or LitData
/// shard (256 MiB): a sample is held whole while it is split into members,
/// so this bounds what a small compressed shard can make bale allocate.
pub const MAX_SAMPLE_BYTES: u64 = 256 << 20;

/// A sample's key and its members `(ext, bytes)`, as [`check_bytes`] returns them.
pub type KeyedSample = (String, Vec<(String, Vec<u8>)>);

/// A message about what a dataset holds that bale cannot map; the caller
/// adds the file.
#[derive(Debug)]
pub(crate) struct ForeignError(pub String);

/// Which tool wrote a dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForeignKind {
    /// MosaicML Streaming's MDS format (`streaming.MDSWriter`).
    Mds,
    /// LitData's optimized format (`litdata.optimize`).
    LitData,
}

impl ForeignKind {
    /// The tool's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            ForeignKind::Mds => "MosaicML Streaming (MDS)",
            ForeignKind::LitData => "LitData",
        }
    }

    /// A short name for summaries and JSON: `mds` or `litdata`.
    pub fn as_str(self) -> &'static str {
        match self {
            ForeignKind::Mds => "mds",
            ForeignKind::LitData => "litdata",
        }
    }
}

/// One column of the source and the member it becomes.
#[derive(Debug, Clone)]
pub struct Column {
    /// The column (MDS) or field (LitData) name.
    pub name: String,
    /// Its type as the tool records it (`jpeg`, `int`, `no_header_numpy:9`).
    pub encoding: String,
    /// The member extension it becomes.
    pub ext: String,
    /// Bytes of every value, when the type has a fixed size.
    fixed: Option<u32>,
    value: values::Value,
}

/// Where one shard's bytes are, and how many samples it holds.
#[derive(Debug, Clone)]
pub(crate) struct ShardSpec {
    /// The file to read.
    pub path: PathBuf,
    /// Whether it is one zstd stream to decompress first.
    pub zstd: bool,
    /// Bytes of the (decompressed) shard, when `index.json` records them.
    pub raw_bytes: Option<u64>,
    /// Samples `index.json` says it holds.
    pub samples: u64,
    /// Whether the shard's config JSON sits between the offsets and the
    /// samples (MDS) or the samples follow the offsets at once (LitData).
    pub has_config: bool,
}

/// A MosaicML Streaming or LitData dataset opened for reading.
#[derive(Debug, Clone)]
pub struct ForeignDataset {
    kind: ForeignKind,
    index: PathBuf,
    columns: Vec<Column>,
    shards: Vec<ShardSpec>,
    samples: u64,
}

/// Whether `dir` holds another tool's dataset: `Some` when it has an
/// `index.json` that MDS or LitData wrote, `None` otherwise.
///
/// # Errors
/// An `index.json` that cannot be read or is not JSON.
pub fn detect(dir: &Path) -> Result<Option<ForeignKind>> {
    let path = dir.join(INDEX_NAME);
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(None);
    }
    let bytes = crate::files::read_capped(&path, MAX_INDEX_BYTES, "index.json")?;
    let json = parse_json(&bytes, &path)?;
    Ok(kind_of(&json))
}

fn parse_json(bytes: &[u8], path: &Path) -> Result<Json> {
    serde_json::from_slice(bytes).map_err(|e| FormatError::Corrupt {
        path: path.to_path_buf(),
        offset: 0,
        what: format!("not JSON: {e}"),
    })
}

fn kind_of(json: &Json) -> Option<ForeignKind> {
    if json.get("shards").is_some_and(Json::is_array) {
        Some(ForeignKind::Mds)
    } else if json.get("chunks").is_some_and(Json::is_array)
        && json.get("config").is_some_and(Json::is_object)
    {
        Some(ForeignKind::LitData)
    } else {
        None
    }
}

impl ForeignDataset {
    /// Opens the dataset in `dir` from its `index.json`. No shard is read
    /// yet; a column type bale cannot map is refused here, naming it.
    ///
    /// # Errors
    /// No or an unreadable `index.json`, one neither tool wrote, a shard
    /// name that leaves `dir`, a column type or compression bale does not
    /// map ([`FormatError::Unsupported`]).
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(INDEX_NAME);
        let bytes = crate::files::read_capped(&path, MAX_INDEX_BYTES, "index.json")?;
        Self::from_index(dir, &bytes)
    }

    /// As [`ForeignDataset::open`], with the bytes of `dir/index.json` given.
    ///
    /// # Errors
    /// As [`ForeignDataset::open`].
    pub fn from_index(dir: &Path, bytes: &[u8]) -> Result<Self> {
        let path = dir.join(INDEX_NAME);
        let json = parse_json(bytes, &path)?;
        let unsupported = |e: ForeignError| FormatError::Unsupported {
            path: path.clone(),
            what: e.0,
        };
        let (kind, columns, shards) = match kind_of(&json) {
            Some(ForeignKind::Mds) => {
                let (c, s) = mds::parse_index(dir, &json).map_err(unsupported)?;
                (ForeignKind::Mds, c, s)
            }
            Some(ForeignKind::LitData) => {
                let (c, s) = litdata::parse_index(dir, &json).map_err(unsupported)?;
                (ForeignKind::LitData, c, s)
            }
            None => {
                return Err(FormatError::Unsupported {
                    path,
                    what: "neither MosaicML Streaming (a \"shards\" list) nor LitData (\"chunks\" and \"config\") wrote this index.json".into(),
                });
            }
        };
        let samples = shards
            .iter()
            .try_fold(0u64, |a, s| a.checked_add(s.samples))
            .ok_or_else(|| FormatError::Unsupported {
                path: path.clone(),
                what: "the shards' sample counts overflow".into(),
            })?;
        let mut seen = std::collections::BTreeMap::new();
        for c in &columns {
            crate::validate_written_ext(&c.ext).map_err(|e| FormatError::Unsupported {
                path: path.clone(),
                what: format!("column {:?} cannot name a member: {e}", c.name),
            })?;
            if c.ext == "cls" && matches!(c.value, values::Value::Float { .. }) {
                return Err(FormatError::Unsupported {
                    path,
                    what: format!(
                        "column {:?} has type {}, but it becomes the .cls member, which readers \
                         parse as an integer label; store integer labels",
                        c.name, c.encoding
                    ),
                });
            }
            if let Some(other) = seen.insert(c.ext.clone(), c.name.clone()) {
                return Err(FormatError::Unsupported {
                    path,
                    what: format!(
                        "columns {other:?} and {:?} both become members .{}",
                        c.name, c.ext
                    ),
                });
            }
        }
        Ok(Self {
            kind,
            index: path,
            columns,
            shards,
            samples,
        })
    }

    /// Which tool wrote it.
    pub fn kind(&self) -> ForeignKind {
        self.kind
    }

    /// Its `index.json`.
    pub fn index_path(&self) -> &Path {
        &self.index
    }

    /// The columns, in the order their members are written.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Samples `index.json` records.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Bytes of the shards as `index.json` records them (decompressed).
    pub fn bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.raw_bytes.unwrap_or(0))
            .fold(0u64, u64::saturating_add)
    }

    /// The files a conversion reads: `index.json` and every shard.
    pub fn files(&self) -> Vec<PathBuf> {
        std::iter::once(self.index.clone())
            .chain(self.shards.iter().map(|s| s.path.clone()))
            .collect()
    }

    /// The key of sample `i`: its number, zero-padded to the width of the
    /// largest (at least 8 digits), so keys sort in dataset order.
    pub fn key(&self, i: u64) -> String {
        let width = self.samples.saturating_sub(1).to_string().len().max(8);
        format!("{i:0width$}")
    }

    /// Calls `f(key, members)` for every sample in order (members in column
    /// order), reading each shard once, front to back. `cancelled` is asked
    /// before each sample; when it says yes, `f` is not called again and
    /// `Ok` is returned (the caller knows why it asked).
    ///
    /// # Errors
    /// What `f` returns; a shard that is missing, not a regular file,
    /// truncated or inconsistent (naming it and the offset); a value that
    /// does not fit its column type (naming the sample and column).
    pub fn for_each<E: From<FormatError>>(
        &self,
        cancelled: &dyn Fn() -> bool,
        mut f: impl FnMut(&str, &[(String, Vec<u8>)]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let mut number = 0u64;
        for spec in &self.shards {
            let mut stream = shard::open(spec)?;
            let mut members: Vec<(String, Vec<u8>)> = Vec::with_capacity(self.columns.len());
            for _ in 0..spec.samples {
                if cancelled() {
                    return Ok(());
                }
                let (offset, raw) = stream.next_sample()?;
                members.clear();
                self.decode(&raw, &spec.path, offset, number, &mut members)?;
                f(&self.key(number), &members)?;
                number += 1;
            }
            stream.finish()?;
        }
        Ok(())
    }

    /// Splits one stored sample into its members. `offset` is where it
    /// starts in `path`, `number` its sample number, for errors.
    fn decode(
        &self,
        raw: &[u8],
        path: &Path,
        offset: u64,
        number: u64,
        out: &mut Vec<(String, Vec<u8>)>,
    ) -> Result<()> {
        let corrupt = |at: usize, what: String| FormatError::Corrupt {
            path: path.to_path_buf(),
            offset: offset + at as u64,
            what: format!("sample {number}: {what}"),
        };
        let mut at = 0usize;
        let mut sizes = Vec::with_capacity(self.columns.len());
        for c in &self.columns {
            match c.fixed {
                Some(n) => sizes.push(n as usize),
                None => {
                    let b = raw.get(at..at + 4).ok_or_else(|| {
                        corrupt(
                            at,
                            format!("the sizes end at byte {} of its {}", at + 4, raw.len()),
                        )
                    })?;
                    sizes.push(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
                    at += 4;
                }
            }
        }
        for (c, size) in self.columns.iter().zip(sizes) {
            let end = at
                .checked_add(size)
                .filter(|e| *e <= raw.len())
                .ok_or_else(|| {
                    corrupt(
                        at,
                        format!(
                            "column {:?} ({size} bytes) runs past the sample's {} bytes",
                            c.name,
                            raw.len()
                        ),
                    )
                })?;
            let data = c
                .value
                .convert(&raw[at..end])
                .map_err(|e| corrupt(at, format!("column {:?} ({}): {e}", c.name, c.encoding)))?;
            if c.ext == "cls" && crate::name::parse_label(&data).is_none() {
                return Err(FormatError::Unsupported {
                    path: path.to_path_buf(),
                    what: format!(
                        "sample {number} (at offset {}): column {:?} ({}) holds {:?}, which as a .cls member \
                         is not a decimal integer label no reader could parse; convert it as a \
                         column of another name, or store integer labels",
                        offset + at as u64,
                        c.name,
                        c.encoding,
                        String::from_utf8_lossy(&data[..data.len().min(64)])
                    ),
                });
            }
            out.push((c.ext.clone(), data));
            at = end;
        }
        if at != raw.len() {
            return Err(corrupt(
                at,
                format!("{} bytes after the last column", raw.len() - at),
            ));
        }
        Ok(())
    }
}

/// `dir/name` for a shard name from `index.json`, refused unless every
/// component is a plain name (no `..`, `.`, root or empty part): a shard
/// never lies outside the dataset directory.
pub(crate) fn shard_path(dir: &Path, name: &str) -> std::result::Result<PathBuf, ForeignError> {
    let rel = Path::new(name);
    let plain = !name.is_empty()
        && !name.contains('\0')
        && !name.contains('\\')
        && rel.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(ForeignError(format!(
            "shard name {name:?} is not a plain relative path inside the dataset directory"
        )));
    }
    Ok(dir.join(rel))
}

/// A JSON field as u64, with the field's name in the error.
pub(crate) fn json_u64(
    obj: &Json,
    field: &str,
    what: &str,
) -> std::result::Result<u64, ForeignError> {
    obj.get(field)
        .and_then(Json::as_u64)
        .ok_or_else(|| ForeignError(format!("{what}: \"{field}\" is missing or not a count")))
}

/// Runs the parsers over `index_json` and the bytes of its first shard,
/// as [`ForeignDataset::for_each`] would over files: for the fuzz target
/// and property tests. Returns the samples read, or the error.
///
/// # Errors
/// As [`ForeignDataset::for_each`].
#[cfg(any(test, feature = "fuzzing"))]
pub fn check_bytes(index_json: &[u8], shard_bytes: &[u8]) -> Result<Vec<KeyedSample>> {
    let dir = Path::new("fuzz");
    let ds = ForeignDataset::from_index(dir, index_json)?;
    let mut out = Vec::new();
    let Some(spec) = ds.shards.first() else {
        return Ok(out);
    };
    let mut stream = shard::from_bytes(spec, shard_bytes)?;
    for number in 0..spec.samples {
        let (offset, raw) = stream.next_sample()?;
        let mut members = Vec::new();
        ds.decode(&raw, &spec.path, offset, number, &mut members)?;
        out.push((ds.key(number), members));
    }
    stream.finish()?;
    Ok(out)
}
