//! The typed options of a pack, and parsers for their command-line spellings.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use bale_format::{Compression, ImageTransform};
use serde::{Deserialize, Serialize};

use crate::error::PackError;

/// Default `shard_size`: 1 GiB.
pub const DEFAULT_SHARD_SIZE: u64 = 1 << 30;
/// Default in-flight byte budget: 128 MiB of file data read but not yet written.
pub const DEFAULT_IN_FLIGHT: u64 = 128 << 20;
/// Default zstd level for `--compress zstd`.
pub const DEFAULT_ZSTD_LEVEL: i32 = bale_format::DEFAULT_ZSTD_LEVEL;
/// Most threads a `--jobs` option may ask for: more only costs memory and
/// start-up time, and a typo like `-j 100000` must not bring a machine down.
pub const MAX_JOBS: usize = 1024;

/// Checks a thread count (`0` means the default), naming the limit.
///
/// # Errors
/// [`PackError::Option`] above [`MAX_JOBS`].
pub fn check_jobs(jobs: usize) -> Result<usize, PackError> {
    if jobs > MAX_JOBS {
        return Err(PackError::Option(format!(
            "--jobs {jobs}: at most {MAX_JOBS} threads (the default is a few per core)"
        )));
    }
    Ok(jobs)
}

/// What to do with an input file that cannot be packed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Stop the pack with the file's path and the error (the default).
    #[default]
    Fail,
    /// Skip the file's whole sample, list it in the summary, count it in the manifest.
    Skip,
}

impl FromStr for OnError {
    type Err = PackError;
    fn from_str(s: &str) -> Result<Self, PackError> {
        match s {
            "fail" => Ok(OnError::Fail),
            "skip" => Ok(OnError::Skip),
            _ => Err(PackError::Option(format!(
                "--on-error {s:?}: expected fail or skip"
            ))),
        }
    }
}

/// Where class labels come from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum LabelMode {
    /// `dir` when the input looks like an ImageFolder tree (every sample is
    /// `CLASS/FILE` directly under a root, with at least two classes), else
    /// `none` (the default).
    #[default]
    Auto,
    /// ImageFolder: the class is the first directory under the root.
    Dir,
    /// A CSV file of `path-or-key,label` rows.
    Csv(PathBuf),
    /// No labels.
    None,
}

impl FromStr for LabelMode {
    type Err = PackError;
    fn from_str(s: &str) -> Result<Self, PackError> {
        match s {
            "auto" => Ok(LabelMode::Auto),
            "dir" => Ok(LabelMode::Dir),
            "none" => Ok(LabelMode::None),
            _ => match s.strip_prefix("csv:") {
                Some(p) if !p.is_empty() => Ok(LabelMode::Csv(PathBuf::from(p))),
                _ => Err(PackError::Option(format!(
                    "--labels {s:?}: expected auto, dir, none or csv:FILE"
                ))),
            },
        }
    }
}

/// The order of samples before they are cut into shards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PackOrder {
    /// Sorted by key, byte-wise (the default).
    #[default]
    Sorted,
    /// The sorted samples permuted by [`bale_format::shuffle::shuffle`] with this seed.
    Shuffle(u64),
}

/// A slice of the input: part `index` of `count` (0-based index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// Which part, `0..count`.
    pub index: u32,
    /// How many parts.
    pub count: u32,
}

impl Part {
    /// The range of sample positions (in the planned order of `n` samples) this part packs:
    /// `[index * n / count, (index + 1) * n / count)`.
    pub fn range(&self, n: usize) -> std::ops::Range<usize> {
        let n = n as u128;
        let start = n * u128::from(self.index) / u128::from(self.count);
        let end = n * (u128::from(self.index) + 1) / u128::from(self.count);
        start as usize..end as usize
    }

    /// The shard name prefix of this part: `part-IIII-of-NNNN-shard`.
    pub fn shard_prefix(&self) -> String {
        format!("part-{:04}-of-{:04}-shard", self.index, self.count)
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Part {
    type Err = PackError;
    /// Parses `I/N` with `0 <= I < N`.
    fn from_str(s: &str) -> Result<Self, PackError> {
        let bad = || {
            PackError::Option(format!(
                "--part {s:?}: expected I/N with 0 <= I < N (I counts from 0)"
            ))
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count || count > 9999 {
            return Err(bad());
        }
        Ok(Part { index, count })
    }
}

/// How shards are compressed: `none`, `zstd` or `zstd:LEVEL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressSpec {
    /// The compression.
    pub compression: Compression,
    /// The zstd level (1-22), ignored for [`Compression::None`].
    pub level: i32,
}

impl FromStr for CompressSpec {
    type Err = PackError;
    fn from_str(s: &str) -> Result<Self, PackError> {
        let bad = || {
            PackError::Option(format!(
                "--compress {s:?}: expected none, zstd or zstd:LEVEL (1-22)"
            ))
        };
        match s {
            "none" => Ok(CompressSpec {
                compression: Compression::None,
                level: 0,
            }),
            "zstd" => Ok(CompressSpec {
                compression: Compression::Zstd,
                level: DEFAULT_ZSTD_LEVEL,
            }),
            _ => {
                let level: i32 = s
                    .strip_prefix("zstd:")
                    .ok_or_else(bad)?
                    .parse()
                    .map_err(|_| bad())?;
                if !(1..=22).contains(&level) {
                    return Err(bad());
                }
                Ok(CompressSpec {
                    compression: Compression::Zstd,
                    level,
                })
            }
        }
    }
}

/// Parses a byte size with an optional unit: `4096`, `512MiB`, `1GiB`, `1.5G`, `100MB`.
///
/// Units are case-insensitive: `B`; `K`, `KB` (1000) and `KiB` (1024); likewise
/// `M`/`MB`/`MiB`, `G`/`GB`/`GiB`, `T`/`TB`/`TiB`. Bare `K`, `M`, `G`, `T` are
/// powers of 1000 like their `B` forms. A fraction is allowed before a unit.
///
/// ```
/// assert_eq!(bale_pack::parse_size("512MiB").unwrap(), 512 << 20);
/// assert_eq!(bale_pack::parse_size("1G").unwrap(), 1_000_000_000);
/// assert!(bale_pack::parse_size("12 parsecs").is_err());
/// ```
///
/// # Errors
/// [`PackError::Option`] for anything else, or a size of 2^64 bytes or more.
pub fn parse_size(s: &str) -> Result<u64, PackError> {
    let bad = || {
        PackError::Option(format!(
            "size {s:?}: expected a number of bytes, optionally with a unit like 512MiB or 1GB"
        ))
    };
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let mult: u64 = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        "t" | "tb" => 1_000_000_000_000,
        "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    if num.is_empty() {
        return Err(bad());
    }
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(bad);
    }
    let f: f64 = num.parse().map_err(|_| bad())?;
    let v = f * mult as f64;
    if !v.is_finite() || v < 0.0 || v >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(v.round() as u64)
}

/// The options that shape a pack's output, as recorded in the manifest's
/// `created_by.options`. Runs with equal shaping options over the same input
/// write byte-identical datasets; `bale merge` joins only parts whose shaping
/// options are equal (but for `part`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShapingOptions {
    /// Shard size limit in bytes (of the uncompressed tar stream).
    pub shard_size: u64,
    /// Shard sample-count limit.
    pub shard_samples: Option<u64>,
    /// `sorted` or `shuffle`.
    pub order: String,
    /// The shuffle seed.
    pub seed: Option<u64>,
    /// Shard compression.
    pub compression: Compression,
    /// zstd level, when compressed.
    pub zstd_level: Option<i32>,
    /// Label mode used (`auto` resolved to `dir` or `none`).
    pub labels: String,
    /// xxh3 of the label CSV, with `csv` labels.
    pub labels_csv_xxh3: Option<String>,
    /// Include globs.
    pub include: Vec<String>,
    /// Exclude globs.
    pub exclude: Vec<String>,
    /// Whether symlinks were followed.
    pub follow_links: bool,
    /// `fail` or `skip`.
    pub on_error: OnError,
    /// Name of the transform applied to members, if any.
    pub transform: Option<String>,
    /// The image stage, if one ran (absent from older manifests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageTransform>,
    /// The part packed, if any.
    pub part: Option<Part>,
    /// What a part was cut from: the whole listing's fingerprint, recorded
    /// by `--part` runs (absent otherwise, and from older manifests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listing: Option<Listing>,
}

/// The fingerprint of a pack's whole listing: every sample's key, its
/// members' extensions and its label, in the planned order. Parts cut from
/// equal listings tile them; `bale merge` refuses parts whose listings
/// differ (the tree changed between their runs: samples would be repeated
/// or lost).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    /// Samples in the whole listing (all parts together).
    pub samples: u64,
    /// xxh3-64 of the keys, extensions and labels, in hex.
    pub xxh3: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        for (s, want) in [
            ("0", 0),
            ("4096", 4096),
            ("512MiB", 512 << 20),
            ("512mib", 512 << 20),
            ("1GiB", 1 << 30),
            ("1 GB", 1_000_000_000),
            ("1.5KiB", 1536),
            ("2T", 2_000_000_000_000),
            ("10b", 10),
        ] {
            assert_eq!(parse_size(s).unwrap(), want, "{s}");
        }
        for s in [
            "",
            "MiB",
            "1XB",
            "-1",
            "1.2.3G",
            "99999999999999999999",
            "20000000TiB",
        ] {
            assert!(parse_size(s).is_err(), "{s:?}");
        }
    }

    #[test]
    fn parts_parse_and_slice() {
        let p: Part = "2/3".parse().unwrap();
        assert_eq!((p.index, p.count), (2, 3));
        assert_eq!(p.shard_prefix(), "part-0002-of-0003-shard");
        for s in ["3/3", "1/0", "1", "a/b", "-1/3"] {
            assert!(s.parse::<Part>().is_err(), "{s}");
        }
        // The parts of any n tile 0..n without overlap.
        for n in [0usize, 1, 2, 7, 100] {
            let mut next = 0;
            for i in 0..3 {
                let r = Part { index: i, count: 3 }.range(n);
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, n);
        }
    }

    #[test]
    fn option_spellings_parse() {
        assert_eq!("skip".parse::<OnError>().unwrap(), OnError::Skip);
        assert!("ignore".parse::<OnError>().is_err());
        assert_eq!(
            "csv:l.csv".parse::<LabelMode>().unwrap(),
            LabelMode::Csv("l.csv".into())
        );
        assert!("csv:".parse::<LabelMode>().is_err());
        assert_eq!("zstd:19".parse::<CompressSpec>().unwrap().level, 19);
        assert_eq!("zstd".parse::<CompressSpec>().unwrap().level, 3);
        assert!("zstd:23".parse::<CompressSpec>().is_err());
        assert!("gzip".parse::<CompressSpec>().is_err());
    }
}
