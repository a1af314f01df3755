//! `bale export-index --dali`: NVIDIA DALI's WebDataset index files, one per
//! shard, written from bale's own indexes (no tar is read).
//!
//! DALI's format (`wds2idx`, version `v1.2`): a first line `v1.2 <samples>`,
//! then one line per sample holding, for each member, `<ext> <offset>
//! <size> <name>` separated by single spaces, where `offset` is where the
//! member's data starts in the tar file. With these files
//! `fn.readers.webdataset(paths=..., index_paths=...)` starts at once
//! instead of scanning every tar, and reads pax-extended members (long
//! names) that its own scan does not.
//!
//! Only plain `.tar` shards qualify (DALI reads neither `.tar.zst` nor
//! HDF5); a key or extension holding whitespace cannot be written in the
//! format and is refused, naming the sample.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use bale_format::atomic::AtomicFile;
use bale_format::{Compression, FormatError, Manifest, ShardIndex};
use serde::Serialize;

use crate::error::{PackError, Result};
use crate::output::{Inputs, Output};

/// The first token of every file: DALI's index format version.
pub const DALI_INDEX_VERSION: &str = "v1.2";

/// Suffix of the files written: `shard-000000.tar` gets `shard-000000.dali.idx`.
pub const DALI_INDEX_SUFFIX: &str = ".dali.idx";

/// One shard and the DALI index written for it.
#[derive(Debug, Clone, Serialize)]
pub struct DaliIndexFile {
    /// The shard (as DALI's `paths` wants it).
    pub shard: PathBuf,
    /// Its DALI index (for `index_paths`, in the same order).
    pub index: PathBuf,
    /// Samples in the shard.
    pub samples: u64,
}

/// What `export_dali_index` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct DaliSummary {
    /// The output directory.
    pub output: PathBuf,
    /// One entry per shard, in dataset order (which is also the files'
    /// name order).
    pub files: Vec<DaliIndexFile>,
    /// Samples in the dataset.
    pub samples: u64,
}

/// The name of shard `i`'s DALI index: the shard's file name without
/// `.tar`, plus [`DALI_INDEX_SUFFIX`]; when those names would not sort in
/// dataset order (or repeat), every name gets the shard number first
/// (`000003-train.dali.idx`).
fn names(manifest: &Manifest) -> Vec<String> {
    let stems: Vec<String> = manifest
        .shards
        .iter()
        .map(|e| {
            let name = Path::new(&e.file)
                .file_name()
                .map_or_else(|| e.file.clone(), |n| n.to_string_lossy().into_owned());
            let stem = name.strip_suffix(".tar").unwrap_or(&name).to_owned();
            format!("{stem}{DALI_INDEX_SUFFIX}")
        })
        .collect();
    if stems.windows(2).all(|w| w[0] < w[1]) {
        return stems;
    }
    let width = manifest
        .shards
        .len()
        .saturating_sub(1)
        .to_string()
        .len()
        .max(6);
    stems
        .iter()
        .enumerate()
        .map(|(i, s)| format!("{i:0width$}-{s}"))
        .collect()
}

/// Writes one DALI index file per shard of the dataset `dataset` into
/// `out_dir` (created if missing, locked while written).
///
/// Every index is opened and checked against the manifest, and every line
/// formed, before the first file is written. Files are written under
/// temporary names and renamed into place without replacing anything; an
/// existing file of the same name is an error unless `force` (which never
/// touches the dataset's own files). A failure removes the files this run
/// wrote.
///
/// # Errors
/// A dataset whose shards are not plain tar, an index that does not match
/// the manifest, a key or extension with whitespace, `out_dir` being the
/// dataset directory, an existing file (without `force`), I/O errors.
pub fn export_dali_index(dataset: &Path, out_dir: &Path, force: bool) -> Result<DaliSummary> {
    let manifest = Manifest::read(dataset)?;
    if let Some((i, e)) = manifest
        .shards
        .iter()
        .enumerate()
        .find(|(_, e)| e.compression != Compression::None)
    {
        return Err(PackError::Option(format!(
            "shard {i} ({}) is {}: DALI's webdataset reader reads plain tar shards only; \
             make a tar copy first with `bale convert {} -o DST --format tar`",
            e.file,
            match e.compression {
                Compression::Zstd => "a .tar.zst",
                _ => "an HDF5 file",
            },
            dataset.display()
        )));
    }
    if fs::metadata(out_dir).is_ok_and(|m| !m.is_dir()) {
        return Err(PackError::Conflict {
            path: out_dir.to_path_buf(),
            what: "the output exists and is not a directory (give the directory to write the index files into)".into(),
        });
    }
    if let (Ok(a), Ok(b)) = (fs::canonicalize(dataset), fs::canonicalize(out_dir))
        && a == b
    {
        return Err(PackError::Option(format!(
            "the output {} is the dataset directory: write DALI's index files to a directory of \
             their own (bale verify counts every .idx file in a dataset directory as its own)",
            out_dir.display()
        )));
    }
    // Everything is read and formed first: nothing is written for a
    // dataset that cannot be exported whole.
    let names = names(&manifest);
    let mut texts = Vec::with_capacity(manifest.shards.len());
    let mut inputs = Inputs::default();
    inputs.add(&Manifest::path_in(dataset));
    for (i, entry) in manifest.shards.iter().enumerate() {
        let shard = Manifest::resolve(dataset, &entry.file);
        let index_path = Manifest::resolve(dataset, &entry.index);
        inputs.add(&shard);
        inputs.add(&index_path);
        let index = ShardIndex::open_expecting(&index_path, entry.samples, entry.members)?;
        let recorded = bale_format::parse_hex64(&entry.index_xxh3);
        if recorded != Some(index.checksum()) {
            return Err(FormatError::IndexMismatch {
                path: index_path,
                what: format!(
                    "its checksum is not the one the manifest records for shard {i}; run `bale verify`"
                ),
            }
            .into());
        }
        let len = fs::metadata(&shard)
            .map_err(|e| PackError::io(&shard, e))?
            .len();
        if len != entry.bytes || len != index.shard_len() {
            return Err(FormatError::IndexMismatch {
                path: shard,
                what: format!(
                    "the shard has {len} bytes, the manifest records {} and its index {}",
                    entry.bytes,
                    index.shard_len()
                ),
            }
            .into());
        }
        texts.push((shard, dali_text(&index)?));
    }
    let mut out = Output::alongside(out_dir, force)?;
    for name in &names {
        let path = out_dir.join(name);
        if inputs.holds(&path) {
            return Err(PackError::WouldDeleteInput { path });
        }
    }
    let empty = Inputs::default();
    for name in &names {
        out.make_room(name, &empty)?;
    }
    let mut files = Vec::with_capacity(names.len());
    for ((shard, text), (name, entry)) in texts.into_iter().zip(names.iter().zip(&manifest.shards))
    {
        let path = out_dir.join(name);
        let mut file = AtomicFile::create(&path)?;
        let tmp = file.tmp_path().to_path_buf();
        let mut w = BufWriter::new(file.file());
        w.write_all(text.as_bytes())
            .and_then(|()| w.flush())
            .map_err(|e| PackError::io(&tmp, e))?;
        drop(w);
        file.commit()?;
        out.track(path.clone());
        files.push(DaliIndexFile {
            shard: fs::canonicalize(&shard).unwrap_or(shard),
            index: path,
            samples: entry.samples,
        });
    }
    out.commit();
    Ok(DaliSummary {
        output: out_dir.to_path_buf(),
        files,
        samples: manifest.samples,
    })
}

/// DALI's index text for one plain-tar shard.
///
/// # Errors
/// A key or extension holding whitespace (the format separates fields with
/// spaces), naming the shard and sample.
pub fn dali_text(index: &ShardIndex) -> Result<String> {
    let mut text = format!("{DALI_INDEX_VERSION} {}\n", index.len());
    for i in 0..index.len() {
        let key = index.key(i);
        let bad = |what: &str| {
            PackError::Format(FormatError::Unsupported {
                path: index.path().to_path_buf(),
                what: format!(
                    "sample {i} ({key:?}): {what} holds whitespace, which DALI's index format cannot hold (it separates fields with spaces); rename the files and pack again"
                ),
            })
        };
        if key.chars().any(char::is_whitespace) {
            return Err(bad("its key"));
        }
        for (j, m) in index.members(i).enumerate() {
            if m.ext.chars().any(char::is_whitespace) {
                return Err(bad(&format!("extension {:?}", m.ext)));
            }
            if j > 0 {
                text.push(' ');
            }
            // For a plain tar the member offset is its data's offset in the file.
            text.push_str(&format!(
                "{} {} {} {key}.{}",
                m.ext, m.offset, m.size, m.ext
            ));
        }
        text.push('\n');
    }
    Ok(text)
}
