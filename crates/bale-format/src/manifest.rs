//! The manifest `bale.json`: what a dataset holds and how it was made.
//!
//! Written last and atomically: a directory without it is not a dataset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::atomic::write_atomic;
use crate::error::{FormatError, Result};
use crate::index::Compression;

/// File name of the manifest in a dataset directory.
pub const MANIFEST_NAME: &str = "bale.json";
/// Value of the manifest's `format` field.
pub(crate) const MANIFEST_FORMAT: &str = "bale";
/// Major version of the manifest this crate writes and reads.
pub(crate) const MANIFEST_MAJOR: u32 = 1;
/// Minor version of the manifest this crate writes.
pub(crate) const MANIFEST_MINOR: u32 = 0;
/// Largest manifest accepted (guards against reading a huge foreign file):
/// room for about 150,000 shards.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// The shard files a manifest lists when `bale index` wrote it: tars it
/// found and indexed in place, the user's, not bale's output. `Ok(None)`
/// when another command wrote it.
///
/// Read leniently, as `--force` must before it removes anything: only
/// `created_by.command` and `shards[].file` count, so a manifest that fails
/// [`Manifest`]'s checks may still be an index's.
///
/// # Errors
/// Why the manifest cannot tell whose the tars beside it are: it is not
/// JSON, no bale run wrote it (its `created_by.tool` is not `bale`: a
/// `bale.json` of the user's or another tool's), or `bale index` wrote it
/// without a `shards` list.
pub fn indexed_in_place(bytes: &[u8]) -> std::result::Result<Option<Vec<String>>, String> {
    let m: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("it is not JSON ({e})"))?;
    if m["created_by"]["tool"].as_str() != Some("bale") {
        return Err("no bale run wrote it (its created_by.tool is not \"bale\")".into());
    }
    if m["created_by"]["command"].as_str() != Some("index") {
        return Ok(None);
    }
    let Some(shards) = m["shards"].as_array() else {
        return Err("`bale index` wrote it, but it lists no shards".into());
    };
    Ok(Some(
        shards
            .iter()
            .filter_map(|s| s["file"].as_str().map(str::to_owned))
            .collect(),
    ))
}

/// The files a manifest lists (`shards[].file` and `shards[].index`), read
/// leniently as [`indexed_in_place`] reads: what `--force` may take for the
/// old dataset's own. Empty when there is no `shards` list.
pub fn listed_files(bytes: &[u8]) -> Vec<String> {
    let Ok(m) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Vec::new();
    };
    let Some(shards) = m["shards"].as_array() else {
        return Vec::new();
    };
    shards
        .iter()
        .flat_map(|s| [s["file"].as_str(), s["index"].as_str()])
        .flatten()
        .map(str::to_owned)
        .collect()
}

/// Formats a checksum as 16 lowercase hex digits, as the manifest stores them.
pub fn hex64(v: u64) -> String {
    format!("{v:016x}")
}

/// Parses 16 hex digits written by [`hex64`].
pub fn parse_hex64(s: &str) -> Option<u64> {
    if s.len() != 16 {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// Count and total bytes of the members with one extension.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldStats {
    /// Number of members.
    pub count: u64,
    /// Total bytes of their data.
    pub bytes: u64,
}

impl FieldStats {
    /// Adds another count.
    pub fn add(&mut self, other: FieldStats) {
        // Saturating: a hand-edited manifest's counts may add past 2**64.
        self.count = self.count.saturating_add(other.count);
        self.bytes = self.bytes.saturating_add(other.bytes);
    }
}

/// One shard of a dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// Shard file, relative to the dataset directory (or absolute).
    pub file: String,
    /// Index file, relative to the dataset directory (or absolute).
    pub index: String,
    /// Number of samples.
    pub samples: u64,
    /// Number of members.
    pub members: u64,
    /// Size of the shard file in bytes.
    pub bytes: u64,
    /// Size of the uncompressed tar stream (equal to `bytes` when not compressed).
    pub tar_bytes: u64,
    /// How the shard is stored.
    pub compression: Compression,
    /// xxh3-64 of the index (its footer), 16 hex digits.
    pub index_xxh3: String,
    /// xxh3-64 of the whole shard file, 16 hex digits, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_xxh3: Option<String>,
    /// Member count and bytes per extension in this shard.
    #[serde(default)]
    pub fields: BTreeMap<String, FieldStats>,
}

impl ShardEntry {
    /// What `index` says that this entry records otherwise (its member,
    /// sample and byte counts, its checksum, its compression), in words;
    /// `None` when they agree. Every reader of a dataset checks this before
    /// it trusts an index.
    pub fn index_mismatch(&self, index: &crate::index::ShardIndex) -> Option<String> {
        if index.member_count() as u64 != self.members {
            return Some(format!(
                "the index holds {} members, the manifest records {}",
                index.member_count(),
                self.members
            ));
        }
        let recorded = crate::parse_hex64(&self.index_xxh3).unwrap_or_default();
        if index.checksum() != recorded {
            return Some(format!(
                "the index checksum is {:016x}, the manifest records {}",
                index.checksum(),
                self.index_xxh3
            ));
        }
        if index.len() as u64 != self.samples {
            return Some(format!(
                "the index holds {} samples, the manifest records {}",
                index.len(),
                self.samples
            ));
        }
        if index.shard_len() != self.bytes {
            return Some(format!(
                "the index describes a shard of {} bytes, the manifest records {}",
                index.shard_len(),
                self.bytes
            ));
        }
        if index.compression() != self.compression {
            return Some(format!(
                "the index says compression {}, the manifest {}",
                index.compression().as_str(),
                self.compression.as_str()
            ));
        }
        None
    }

    /// Whether reading this shard needs format 1.1: an HDF5 shard, or a
    /// plain tar with a scattered index (recorded with no tar stream).
    fn needs_1_1(&self) -> bool {
        self.compression == Compression::H5
            || (self.compression == Compression::None && self.tar_bytes == 0 && self.samples > 0)
    }
}

/// How a dataset was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreatedBy {
    /// Tool name (`bale`).
    pub tool: String,
    /// Tool version.
    pub version: String,
    /// Command that wrote the dataset (`pack`, `merge`, `index`, `convert`).
    pub command: String,
    /// The options that shape the output, as the command records them.
    #[serde(default)]
    pub options: serde_json::Value,
}

/// Extension of the member `bale pack`'s image stage adds to every sample
/// holding an image it transformed: a JSON object mapping each stored image
/// member's extension to the original image's size as displayed (after EXIF
/// orientation), e.g. `{"jpg":{"height":375,"width":500}}`. A sample that
/// already holds a member with this extension is refused by the stage.
pub const ORIGINAL_SIZE_EXT: &str = "orig.json";

/// How `bale pack` transformed images, stored in the manifest at
/// `created_by.options.image` (absent when no image stage ran). Read it with
/// [`Manifest::image_transform`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageTransform {
    /// The resize rule: `shorter:N`, `longer:N`, `fit:WxH`, or `None`.
    pub resize: Option<String>,
    /// Whether images smaller than the target were enlarged.
    pub upscale: bool,
    /// Stored format: `jpeg`, `png`, `keep` or `raw` (`.npy`).
    pub format: String,
    /// JPEG quality, with `jpeg`.
    pub quality: Option<u8>,
    /// Colour mode: `rgb` (8-bit RGB) or `keep`.
    pub mode: String,
    /// Images with more pixels were refused.
    pub max_pixels: u64,
    /// Extensions treated as images.
    pub exts: Vec<String>,
    /// Resampling filter (`lanczos3`).
    pub filter: String,
    /// Extension of the member holding original sizes ([`ORIGINAL_SIZE_EXT`]).
    pub original_size: String,
}

/// The manifest of a dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always `"bale"`.
    pub format: String,
    /// `"<major>.<minor>"`.
    pub format_version: String,
    /// Total samples.
    pub samples: u64,
    /// Total bytes of the shard files.
    pub bytes: u64,
    /// The shards, in dataset order: sample `i` of the dataset is found by
    /// walking the shards' sample counts.
    pub shards: Vec<ShardEntry>,
    /// Member count and bytes per extension, over all shards.
    pub fields: BTreeMap<String, FieldStats>,
    /// Class names, when samples carry a `.cls` member holding an index into this list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// Input files skipped by the writer (`--on-error skip`).
    #[serde(default)]
    pub skipped: u64,
    /// How the dataset was made.
    pub created_by: CreatedBy,
}

impl Manifest {
    /// A manifest over `shards`, with totals and fields summed from them.
    pub fn new(
        shards: Vec<ShardEntry>,
        labels: Option<Vec<String>>,
        created_by: CreatedBy,
    ) -> Self {
        let mut fields: BTreeMap<String, FieldStats> = BTreeMap::new();
        for s in &shards {
            for (k, v) in &s.fields {
                fields.entry(k.clone()).or_default().add(*v);
            }
        }
        Manifest {
            format: MANIFEST_FORMAT.to_owned(),
            // 1.1 only where it matters (HDF5 shards, and plain tars whose
            // index is scattered: `tar_bytes` 0 with samples): other tar
            // datasets keep 1.0 manifests.
            format_version: if shards.iter().any(ShardEntry::needs_1_1) {
                format!("{MANIFEST_MAJOR}.1")
            } else {
                format!("{MANIFEST_MAJOR}.{MANIFEST_MINOR}")
            },
            samples: shards.iter().map(|s| s.samples).sum(),
            bytes: shards.iter().map(|s| s.bytes).sum(),
            shards,
            fields,
            labels,
            skipped: 0,
            created_by,
        }
    }

    /// The image transform `bale pack` applied, if any (from
    /// `created_by.options.image`; `None` for datasets packed without one,
    /// or written before it was recorded).
    pub fn image_transform(&self) -> Option<ImageTransform> {
        let v = self.created_by.options.get("image")?;
        serde_json::from_value(v.clone()).ok()
    }

    /// The manifest's path in `dir`.
    pub fn path_in(dir: &Path) -> PathBuf {
        dir.join(MANIFEST_NAME)
    }

    /// Reads and checks the manifest of the dataset in `dir`.
    ///
    /// # Errors
    /// [`FormatError::Incomplete`] when there is none; invalid JSON (with
    /// line, column and byte offset), a foreign file, an unknown major version,
    /// or totals that disagree with the shards.
    pub fn read(dir: &Path) -> Result<Self> {
        let bytes = Self::read_bytes(dir)?;
        Self::from_slice(&bytes, &Self::path_in(dir))
    }

    /// The bytes of the manifest of the dataset in `dir`, unparsed: a
    /// regular file of at most [`MAX_MANIFEST_BYTES`].
    ///
    /// # Errors
    /// [`FormatError::Incomplete`] when there is none; a manifest that is not
    /// a regular file or is too large; I/O errors.
    pub fn read_bytes(dir: &Path) -> Result<Vec<u8>> {
        let path = Self::path_in(dir);
        match crate::files::read_capped(&path, MAX_MANIFEST_BYTES, "manifest") {
            Err(FormatError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Err(FormatError::Incomplete {
                    dir: dir.to_path_buf(),
                })
            }
            r => r,
        }
    }

    /// Parses and checks a manifest; `path` names it in errors.
    ///
    /// # Errors
    /// As [`Manifest::read`].
    pub fn from_slice(bytes: &[u8], path: &Path) -> Result<Self> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| json_error(path, bytes, &e))?;
        if value.get("format").and_then(|v| v.as_str()) != Some(MANIFEST_FORMAT) {
            return Err(FormatError::BadMagic {
                path: path.to_path_buf(),
                what: "manifest (no \"format\": \"bale\" field)",
            });
        }
        let version = value
            .get("format_version")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        let (major, minor) = parse_version(version).ok_or_else(|| FormatError::Manifest {
            path: path.to_path_buf(),
            what: format!("format_version {version:?} is not \"<major>.<minor>\""),
        })?;
        if major != MANIFEST_MAJOR {
            return Err(FormatError::UnsupportedVersion {
                path: path.to_path_buf(),
                major,
                minor,
                supported: MANIFEST_MAJOR,
            });
        }
        let m: Manifest = serde_json::from_value(value).map_err(|e| FormatError::Manifest {
            path: path.to_path_buf(),
            what: e.to_string(),
        })?;
        m.check(path)?;
        Ok(m)
    }

    fn check(&self, path: &Path) -> Result<()> {
        let bad = |what: String| {
            Err(FormatError::Manifest {
                path: path.to_path_buf(),
                what,
            })
        };
        // Checked: the counts come from the file, and their sum must not overflow.
        let total = self
            .shards
            .iter()
            .try_fold(0u64, |t, s| t.checked_add(s.samples));
        if total != Some(self.samples) {
            let total = total.map_or_else(|| "more than 2^64".to_owned(), |t| t.to_string());
            return bad(format!(
                "samples is {}, the shards hold {total}",
                self.samples
            ));
        }
        for (i, s) in self.shards.iter().enumerate() {
            if s.file.is_empty()
                || s.index.is_empty()
                || s.file.contains('\0')
                || s.index.contains('\0')
            {
                return bad(format!("shard {i}: empty or invalid file name"));
            }
            if parse_hex64(&s.index_xxh3).is_none() {
                return bad(format!(
                    "shard {i}: index_xxh3 {:?} is not 16 hex digits",
                    s.index_xxh3
                ));
            }
            if s.shard_xxh3
                .as_deref()
                .is_some_and(|h| parse_hex64(h).is_none())
            {
                return bad(format!("shard {i}: shard_xxh3 is not 16 hex digits"));
            }
        }
        Ok(())
    }

    /// Serializes the manifest: pretty JSON with a final newline, byte-identical for equal manifests.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).unwrap_or_default();
        v.push(b'\n');
        v
    }

    /// Writes the manifest into `dir` atomically (temporary file, sync, rename).
    ///
    /// # Errors
    /// I/O errors, naming the file.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_atomic(Self::path_in(dir), &self.to_bytes())
    }

    /// Resolves a path from the manifest (a shard or index file) against the dataset directory.
    pub fn resolve(dir: &Path, file: &str) -> PathBuf {
        let p = Path::new(file);
        // A URL (`s3://bucket/x.tar`, written by `bale index` of tars in a bucket) is absolute.
        if p.is_absolute() || crate::read_at::is_url(p) {
            p.to_path_buf()
        } else {
            dir.join(p)
        }
    }
}

fn parse_version(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn json_error(path: &Path, bytes: &[u8], e: &serde_json::Error) -> FormatError {
    // Byte offset of the line and column serde reports.
    let mut offset = 0usize;
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        if i + 1 == e.line() {
            offset += e.column().saturating_sub(1).min(line.len());
            break;
        }
        offset += line.len() + 1;
    }
    FormatError::Manifest {
        path: path.to_path_buf(),
        what: format!("not valid JSON at offset {offset}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        let shard = ShardEntry {
            file: "shard-000000.tar".into(),
            index: "shard-000000.idx".into(),
            samples: 2,
            members: 3,
            bytes: 4096,
            tar_bytes: 4096,
            compression: Compression::None,
            index_xxh3: hex64(42),
            shard_xxh3: Some(hex64(7)),
            fields: [(
                "jpg".to_string(),
                FieldStats {
                    count: 2,
                    bytes: 10,
                },
            )]
            .into(),
        };
        Manifest::new(
            vec![shard],
            Some(vec!["cat".into()]),
            CreatedBy {
                tool: "bale".into(),
                version: "0.1.0".into(),
                command: "pack".into(),
                options: serde_json::json!({"jobs": null}),
            },
        )
    }

    #[test]
    fn version_is_1_1_only_for_shards_that_need_it() {
        let m = manifest();
        assert_eq!(m.format_version, "1.0");
        let with = |f: &dyn Fn(&mut ShardEntry)| {
            let mut s = m.shards[0].clone();
            f(&mut s);
            Manifest::new(vec![m.shards[0].clone(), s], None, m.created_by.clone()).format_version
        };
        assert_eq!(with(&|s| s.compression = Compression::H5), "1.1");
        // A plain tar with a scattered index records no tar stream.
        assert_eq!(with(&|s| s.tar_bytes = 0), "1.1");
        assert_eq!(with(&|s| s.samples = 0), "1.0");
        assert_eq!(
            with(&|s| {
                s.tar_bytes = 0;
                s.compression = Compression::Zstd;
            }),
            "1.0"
        );
    }

    #[test]
    fn round_trips() {
        let m = manifest();
        let back = Manifest::from_slice(&m.to_bytes(), Path::new("bale.json")).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.fields["jpg"].count, 2);
    }

    #[test]
    fn image_transform_record_round_trips_and_is_optional() {
        let mut m = manifest();
        assert_eq!(m.image_transform(), None, "old manifests have none");
        let rec = ImageTransform {
            resize: Some("shorter:256".into()),
            upscale: false,
            format: "jpeg".into(),
            quality: Some(90),
            mode: "rgb".into(),
            max_pixels: 178_956_970,
            exts: vec!["jpg".into(), "png".into()],
            filter: "lanczos3".into(),
            original_size: ORIGINAL_SIZE_EXT.into(),
        };
        m.created_by.options["image"] = serde_json::to_value(&rec).unwrap();
        let back = Manifest::from_slice(&m.to_bytes(), Path::new("bale.json")).unwrap();
        assert_eq!(back.image_transform(), Some(rec));
        assert_eq!(back.created_by.options["image"]["resize"], "shorter:256");
    }

    #[test]
    fn refuses_bad_manifests() {
        let p = Path::new("d/bale.json");
        let err = Manifest::from_slice(b"{\"format\": \"bale\",\n  oops", p).unwrap_err();
        assert!(err.to_string().contains("offset"), "{err}");
        let err = Manifest::from_slice(b"{\"format\": \"other\"}", p).unwrap_err();
        assert!(matches!(err, FormatError::BadMagic { .. }), "{err}");
        let mut v: serde_json::Value = serde_json::from_slice(&manifest().to_bytes()).unwrap();
        v["format_version"] = "2.0".into();
        let err = Manifest::from_slice(v.to_string().as_bytes(), p).unwrap_err();
        assert!(
            matches!(err, FormatError::UnsupportedVersion { major: 2, .. }),
            "{err}"
        );
        let mut v: serde_json::Value = serde_json::from_slice(&manifest().to_bytes()).unwrap();
        v["samples"] = 3.into();
        let err = Manifest::from_slice(v.to_string().as_bytes(), p).unwrap_err();
        assert!(err.to_string().contains("samples is 3"), "{err}");
    }

    #[test]
    fn missing_manifest_means_incomplete() {
        let dir = tempfile::tempdir().unwrap();
        let err = Manifest::read(dir.path()).unwrap_err();
        assert!(matches!(err, FormatError::Incomplete { .. }), "{err}");
    }
}
