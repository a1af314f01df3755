//! Which files a staged copy holds, their sizes and checksums, from the
//! dataset's manifest; and the check of the source files against it before
//! anything is copied.

use std::collections::BTreeSet;
use std::path::Path;

use bale_format::shown;
use bale_format::{FormatError, Manifest, ShardEntry, ShardIndex};
use bale_format::{hex64, parse_hex64};

use super::marker::is_plain_relative;
use crate::error::{ReaderError, Result, StageErrorKind};

/// One file of the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Planned {
    /// The path relative to the dataset (and to the staging folder).
    pub rel: String,
    /// The shard's position in the manifest.
    pub shard: usize,
    /// Index or shard, with what the manifest records about it.
    pub what: What,
    /// The file's length: the shard's recorded bytes; for an index, its
    /// length once [`Plan::check_sources`] has opened it (0 before).
    pub len: u64,
}

/// What a planned file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum What {
    /// A shard index, with the manifest's `index_xxh3`.
    Index {
        /// The index's own checksum.
        xxh3: u64,
    },
    /// A shard, with the manifest's whole-file checksum when it records one.
    Shard {
        /// `shard_xxh3`.
        xxh3: Option<u64>,
    },
}

/// The files of a staged copy, in manifest order (each shard's index, then the shard).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The files.
    pub files: Vec<Planned>,
    /// Length of the manifest, copied last.
    pub manifest_len: u64,
}

impl Plan {
    /// The plan for the dataset in `src` described by `manifest` (whose file
    /// is `manifest_len` bytes). Reads no file.
    ///
    /// # Errors
    /// [`StageErrorKind::BadManifest`]: a file outside the dataset directory,
    /// a file named twice, or shard sizes that add up past 2^64.
    pub fn new(src: &Path, manifest: &Manifest, manifest_len: u64) -> Result<Plan> {
        let bad = |what: String| ReaderError::Stage {
            path: Manifest::path_in(src),
            what: format!("cannot stage {}: {what}", shown(src)),
            kind: StageErrorKind::BadManifest,
        };
        let mut files = Vec::with_capacity(manifest.shards.len() * 2);
        let mut seen = BTreeSet::new();
        let mut shard_bytes = 0u64;
        for (i, e) in manifest.shards.iter().enumerate() {
            for f in [&e.file, &e.index] {
                if bale_storage::is_url(Path::new(f)) {
                    return Err(bad(format!(
                        "its manifest names {f}, a file in object storage (`bale index` of tars in a bucket); bale stage copies a dataset whose files are beside its manifest: convert it to one first (`bale convert {} -o DIR`), or index the tars into their own prefix (`bale index -o URL_OF_THAT_PREFIX ...`) and stage that URL",
                        shown(src)
                    )));
                }
                if !is_plain_relative(f) {
                    return Err(bad(format!(
                        "its manifest names {f:?}, a file outside the dataset directory"
                    )));
                }
                if !seen.insert(Path::new(f).to_path_buf()) {
                    return Err(bad(format!("its manifest names {f:?} twice")));
                }
            }
            shard_bytes = shard_bytes.checked_add(e.bytes).ok_or_else(|| {
                bad(format!(
                    "its manifest records shard sizes that add up to more than 2^64 bytes (shard {i}, {}, records {} bytes)",
                    e.file, e.bytes
                ))
            })?;
            // Manifest::from_slice checked both to be 16 hex digits.
            let index_xxh3 = parse_hex64(&e.index_xxh3)
                .ok_or_else(|| bad(format!("shard {i}: index_xxh3 is not 16 hex digits")))?;
            let shard_xxh3 =
                match &e.shard_xxh3 {
                    Some(h) => Some(parse_hex64(h).ok_or_else(|| {
                        bad(format!("shard {i}: shard_xxh3 is not 16 hex digits"))
                    })?),
                    None => None,
                };
            files.push(Planned {
                rel: e.index.clone(),
                shard: i,
                what: What::Index { xxh3: index_xxh3 },
                len: 0,
            });
            files.push(Planned {
                rel: e.file.clone(),
                shard: i,
                what: What::Shard { xxh3: shard_xxh3 },
                len: e.bytes,
            });
        }
        Ok(Plan {
            files,
            manifest_len,
        })
    }

    /// The files' paths, as the marker lists them.
    pub fn rels(&self) -> Vec<String> {
        self.files.iter().map(|p| p.rel.clone()).collect()
    }

    /// Checks every source file against the manifest before anything is
    /// copied, and records each index's length: indexes are opened with
    /// their counts compared first, then their checksum and the shard length
    /// they describe; shards must be regular files of the recorded length.
    ///
    /// # Errors
    /// [`StageErrorKind::SourceMismatch`], naming the file.
    pub fn check_sources(&mut self, src: &Path, manifest: &Manifest) -> Result<()> {
        for p in &mut self.files {
            let entry = &manifest.shards[p.shard];
            let path = src.join(&p.rel);
            match p.what {
                What::Index { xxh3 } => {
                    let idx =
                        open_index(&path, entry, xxh3).map_err(|e| source_mismatch(&path, e))?;
                    p.len = bale_format::index_file_bytes(idx.as_bytes()).len() as u64;
                }
                What::Shard { .. } => {
                    // A local regular file, or an object in a bucket (its size from a HEAD).
                    let (_, len) = bale_format::read_at::open(&path)
                        .map_err(|e| source_mismatch(&path, e.into()))?;
                    if len != entry.bytes {
                        return Err(wrong_length(&path, len, entry.bytes));
                    }
                }
            }
        }
        Ok(())
    }

    /// Bytes of the whole copy: every file and the manifest.
    ///
    /// # Errors
    /// [`StageErrorKind::BadManifest`] past 2^64.
    pub fn total(&self, src: &Path) -> Result<u64> {
        self.sum(src, |_| true)
    }

    /// Bytes still to copy into `target`: the files not already there with
    /// their length, and the manifest.
    ///
    /// # Errors
    /// [`StageErrorKind::BadManifest`] past 2^64.
    pub fn to_copy(&self, src: &Path, target: &Path) -> Result<u64> {
        self.sum(src, |p| !in_place(target, p))
    }

    fn sum(&self, src: &Path, include: impl Fn(&Planned) -> bool) -> Result<u64> {
        self.files
            .iter()
            .filter(|p| include(p))
            .try_fold(self.manifest_len, |t, p| t.checked_add(p.len))
            .ok_or_else(|| ReaderError::Stage {
                path: Manifest::path_in(src),
                what: format!(
                    "cannot stage {}: its files add up to more than 2^64 bytes",
                    shown(src)
                ),
                kind: StageErrorKind::BadManifest,
            })
    }
}

/// The length of the regular file at `path` (not following a symlink), if it is one.
pub(crate) fn regular_len(path: &Path) -> Option<u64> {
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
}

/// Whether `p` is in `target` with its length (a candidate to keep, once checked).
pub(crate) fn in_place(target: &Path, p: &Planned) -> bool {
    regular_len(&target.join(&p.rel)) == Some(p.len)
}

/// Opens the index at `path` for the manifest's `entry`: its counts are
/// compared before it is mapped, then its checksum with `xxh3` and the shard
/// length it describes with `entry.bytes`.
///
/// # Errors
/// As [`ShardIndex::open_expecting`]; [`FormatError::IndexMismatch`] naming
/// what differs.
pub(crate) fn open_index(path: &Path, entry: &ShardEntry, xxh3: u64) -> Result<ShardIndex> {
    let idx = ShardIndex::open_expecting(path, entry.samples, entry.members)?;
    let mismatch = |what: String| {
        Err(ReaderError::from(FormatError::IndexMismatch {
            path: path.to_path_buf(),
            what,
        }))
    };
    if idx.checksum() != xxh3 {
        return mismatch(format!(
            "its checksum is {}, the manifest records {}",
            hex64(idx.checksum()),
            hex64(xxh3)
        ));
    }
    if idx.shard_len() != entry.bytes {
        return mismatch(format!(
            "the index describes a shard of {} bytes, the manifest records {}",
            idx.shard_len(),
            entry.bytes
        ));
    }
    Ok(idx)
}

/// A source file that is not what the manifest records.
pub(crate) fn source_mismatch(path: &Path, e: ReaderError) -> ReaderError {
    match e {
        e @ ReaderError::Stage { .. } => e,
        e => ReaderError::Stage {
            path: path.to_path_buf(),
            what: e.to_string(),
            kind: StageErrorKind::SourceMismatch,
        },
    }
}

/// A source shard whose length differs from the manifest's.
pub(crate) fn wrong_length(path: &Path, len: u64, recorded: u64) -> ReaderError {
    ReaderError::Stage {
        path: path.to_path_buf(),
        what: format!(
            "{} has {len} bytes, the manifest records {recorded}: the dataset changed or is damaged",
            shown(path)
        ),
        kind: StageErrorKind::SourceMismatch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestDataset;

    fn dataset(shards: u64) -> (tempfile::TempDir, Manifest, u64) {
        let d = tempfile::tempdir().unwrap();
        TestDataset::new(20, shards).write(d.path()).unwrap();
        let bytes = Manifest::read_bytes(d.path()).unwrap();
        let m = Manifest::from_slice(&bytes, &Manifest::path_in(d.path())).unwrap();
        (d, m, bytes.len() as u64)
    }

    fn kind(r: Result<Plan>) -> (StageErrorKind, String) {
        match r {
            Err(ReaderError::Stage { kind, what, .. }) => (kind, what),
            other => panic!("expected a stage error, got {other:?}"),
        }
    }

    #[test]
    fn a_plan_lists_each_index_then_its_shard_with_the_manifest_figures() {
        let (d, m, mlen) = dataset(3);
        let mut plan = Plan::new(d.path(), &m, mlen).unwrap();
        assert_eq!(plan.files.len(), 6);
        for (i, e) in m.shards.iter().enumerate() {
            let (idx, shard) = (&plan.files[2 * i], &plan.files[2 * i + 1]);
            assert_eq!(
                (idx.rel.as_str(), idx.shard, idx.len),
                (e.index.as_str(), i, 0)
            );
            assert_eq!(
                idx.what,
                What::Index {
                    xxh3: parse_hex64(&e.index_xxh3).unwrap()
                }
            );
            assert_eq!((shard.rel.as_str(), shard.len), (e.file.as_str(), e.bytes));
            assert_eq!(
                shard.what,
                What::Shard {
                    xxh3: e.shard_xxh3.as_deref().and_then(parse_hex64)
                }
            );
        }
        plan.check_sources(d.path(), &m).unwrap();
        for p in plan
            .files
            .iter()
            .filter(|p| matches!(p.what, What::Index { .. }))
        {
            assert_eq!(
                p.len,
                std::fs::metadata(d.path().join(&p.rel)).unwrap().len()
            );
        }
        let total = plan.total(d.path()).unwrap();
        assert_eq!(total, plan.files.iter().map(|p| p.len).sum::<u64>() + mlen);
        // Nothing is in place in an empty folder; everything is in the source itself.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(plan.to_copy(d.path(), empty.path()).unwrap(), total);
        assert_eq!(plan.to_copy(d.path(), d.path()).unwrap(), mlen);
    }

    #[test]
    fn files_outside_the_dataset_or_named_twice_are_refused() {
        let (d, m, mlen) = dataset(2);
        for (file, want) in [
            ("../other/shard.tar", "outside the dataset directory"),
            ("/data/shard.tar", "outside the dataset directory"),
            ("shard-000001.tar", "twice"),
        ] {
            let mut m = m.clone();
            m.shards[0].file = file.into();
            let (k, what) = kind(Plan::new(d.path(), &m, mlen));
            assert_eq!(k, StageErrorKind::BadManifest);
            assert!(what.contains(want), "{what}");
        }
    }

    #[test]
    fn shard_sizes_past_2_pow_64_are_refused() {
        let (d, mut m, mlen) = dataset(2);
        m.shards[1].bytes = u64::MAX;
        let (k, what) = kind(Plan::new(d.path(), &m, mlen));
        assert_eq!(k, StageErrorKind::BadManifest);
        assert!(what.contains("more than 2^64 bytes"), "{what}");
        // One shard alone fits, but not with the indexes and the manifest.
        let (d, mut m, mlen) = dataset(1);
        m.shards[0].bytes = u64::MAX;
        let plan = Plan::new(d.path(), &m, mlen).unwrap();
        let e = plan.total(d.path()).unwrap_err();
        assert!(e.to_string().contains("more than 2^64"), "{e}");
    }

    #[test]
    fn sources_are_checked_against_the_manifest() {
        let (d, m, mlen) = dataset(2);
        let check = |m: &Manifest| {
            let mut plan = Plan::new(d.path(), m, mlen).unwrap();
            plan.check_sources(d.path(), m).unwrap_err().to_string()
        };
        // A wrong shard length names both lengths, from the index.
        let mut wrong = m.clone();
        wrong.shards[1].bytes += 512;
        let e = check(&wrong);
        assert!(
            e.contains(&format!(
                "the index describes a shard of {} bytes, the manifest records {}",
                m.shards[1].bytes,
                m.shards[1].bytes + 512
            )),
            "{e}"
        );
        // Counts are compared before the index is mapped.
        let mut wrong = m.clone();
        wrong.shards[0].samples += 1;
        assert!(check(&wrong).contains("samples, the manifest records"));
        let mut wrong = m.clone();
        wrong.shards[0].index_xxh3 = hex64(1);
        assert!(check(&wrong).contains("its checksum is"));
        // Devices and FIFOs are refused without reading them.
        let shard = d.path().join(&m.shards[0].file);
        std::fs::remove_file(&shard).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &shard).unwrap();
        assert!(check(&m).contains("is a device, not a regular file"));
        let idx = d.path().join(&m.shards[1].index);
        std::fs::remove_file(&idx).unwrap();
        let c = std::ffi::CString::new(idx.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let mut m2 = m.clone();
        m2.shards.remove(0);
        assert!(check(&m2).contains("is a FIFO, not a regular file"));
    }

    #[test]
    fn a_shard_of_another_length_is_refused() {
        let (d, m, mlen) = dataset(1);
        let shard = d.path().join(&m.shards[0].file);
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(&shard)
            .unwrap();
        f.set_len(1 << 40).unwrap(); // Sparse: reading it would take minutes.
        let mut plan = Plan::new(d.path(), &m, mlen).unwrap();
        let e = plan.check_sources(d.path(), &m).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "has {} bytes, the manifest records {}",
                1u64 << 40,
                m.shards[0].bytes
            )),
            "{e}"
        );
    }
}
