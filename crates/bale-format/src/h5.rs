//! HDF5 shards (`.h5`, feature `hdf5`): one HDF5 file per shard that h5py
//! opens unchanged, and a bale index (layout 1.1, scattered members) that
//! points at every member's bytes inside it, so bale's readers serve it with
//! positioned reads and no HDF5 library at run time.
//!
//! Layout of a shard of N samples (docs/format.md is normative):
//!
//! | dataset | type, shape | content |
//! | --- | --- | --- |
//! | `/keys` | variable-length UTF-8 string, (N,) | sample keys, in shard order |
//! | `/labels` | int64, (N,) | the `.cls` value of each sample, when every sample has an integer `.cls` |
//! | `/fields/<ext>/data` | uint8, (total,), contiguous | the members' bytes, concatenated in sample order |
//! | `/fields/<ext>/offsets` | uint64, (N+1,) | sample i's member is `data[offsets[i]:offsets[i+1]]` |
//! | `/fields/<ext>/present` | uint8, (N,) | only when some sample lacks the field: 1 where it has it |
//! | `/dense/<ext>` | uint8, (N,H,W,C), chunks (1,H,W,C) | when every sample's `<ext>` (`npy`, or ending in `.npy`) is a C-order uint8 array of one 3-D shape: the arrays' pixels |
//!
//! The writer spools each field's bytes to a temporary file while samples
//! arrive (memory: the per-member bookkeeping only) and writes the HDF5 file
//! at [`H5ShardWriter::finish`], copying the spools through a 4 MiB buffer.

use std::collections::BTreeMap;
use std::fs::{self, File};
#[cfg(feature = "hdf5")]
use std::io::Read;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::hash::{Xxh3, xxh3_64};

use crate::atomic::{AtomicFile, TEMP_PREFIX};
use crate::error::{FormatError, Result};
use crate::index::{Compression, IndexBuilder};
use crate::manifest::{FieldStats, ShardEntry, hex64};
use crate::name::validate_written_ext;
use crate::shard::{KeySet, Member, check_new_sample, index_file_name};

/// Copy buffer for spools (4 MiB).
const COPY_BUFFER: usize = 4 << 20;

fn h5err(path: &Path, e: impl std::fmt::Display) -> FormatError {
    FormatError::Hdf5 {
        path: path.to_path_buf(),
        what: e.to_string(),
    }
}

/// The shape of a `.npy` array bale stores densely: C-order uint8, 3-D.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NpyU8 {
    /// Height, width, channels.
    pub shape: [usize; 3],
    /// Length of the `.npy` header (the pixels start there).
    pub header_len: usize,
}

/// The shape of a `.npy` member whose first bytes are `head` and whose
/// length is `total`, if it is a C-order uint8 3-D array; else `None`.
pub(crate) fn parse_npy_u8(head: &[u8], total: u64) -> Option<NpyU8> {
    let (shape, header_len) = crate::npy::parse(head).ok()?.u8_hwc(total)?;
    Some(NpyU8 { shape, header_len })
}

/// Whether a field is a candidate for a dense array (`npy` or `*.npy`).
fn is_npy_field(ext: &str) -> bool {
    ext == "npy" || ext.ends_with(".npy")
}

/// One field's spool: its members' bytes, concatenated, in a temporary file.
#[derive(Debug)]
struct Spool {
    path: PathBuf,
    out: Option<BufWriter<File>>,
    len: u64,
    /// For `.npy` fields: each member's array shape, while they all agree.
    npy: Option<Vec<NpyU8>>,
}

impl Drop for Spool {
    fn drop(&mut self) {
        self.out.take();
        let _ = fs::remove_file(&self.path);
    }
}

#[derive(Debug, Clone)]
struct MemberRec {
    ext: String,
    /// Offset in the field's spool (= in its data dataset).
    offset: u64,
    size: u64,
    checksum: u64,
}

#[derive(Debug)]
struct SampleRec {
    key: String,
    members: Vec<MemberRec>,
    label: Option<i64>,
}

/// Writes one HDF5 shard and its index into a directory, atomically.
///
/// Samples go in with the same calls as a tar [`crate::ShardWriter`]
/// ([`H5ShardWriter::write_sample`], or `begin_sample` / `add_member` /
/// `end_sample`); [`H5ShardWriter::finish`] writes the `.h5` and `.idx`
/// under temporary names, renames them into place and returns the manifest
/// entry. Dropped unfinished, it removes its temporary files.
///
/// ```
/// # #[cfg(feature = "hdf5")] {
/// use bale_format::{Member, h5::H5ShardWriter, read::ShardReader};
/// let dir = tempfile::tempdir().unwrap();
/// let mut w = H5ShardWriter::create(dir.path(), "shard-000000.h5").unwrap();
/// w.write_sample("0001", &[Member { ext: "txt", data: b"hello" }]).unwrap();
/// let entry = w.finish().unwrap();
/// let r = ShardReader::open(dir.path().join(&entry.file), dir.path().join(&entry.index)).unwrap();
/// assert_eq!(r.read(0, true).unwrap().get("txt"), Some(&b"hello"[..]));
/// # }
/// ```
#[derive(Debug)]
pub struct H5ShardWriter {
    dir: PathBuf,
    file_name: String,
    dest: PathBuf,
    spools: BTreeMap<String, Spool>,
    samples: Vec<SampleRec>,
    keys: KeySet,
    cur: Option<SampleRec>,
    spooled: u64,
}

impl H5ShardWriter {
    /// Starts shard `file_name` (such as `shard-000000.h5`) in `dir`.
    ///
    /// # Errors
    /// A build without the `hdf5` feature ([`NO_HDF5`]).
    pub fn create(dir: &Path, file_name: &str) -> Result<Self> {
        #[cfg(not(feature = "hdf5"))]
        return Err(h5err(&dir.join(file_name), NO_HDF5));
        #[cfg(feature = "hdf5")]
        Ok(Self {
            dir: dir.to_path_buf(),
            file_name: file_name.to_owned(),
            dest: dir.join(file_name),
            spools: BTreeMap::new(),
            samples: Vec::new(),
            keys: KeySet::default(),
            cur: None,
            spooled: 0,
        })
    }

    /// Number of samples written so far.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether no sample was written.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Member bytes spooled so far.
    pub fn bytes_written(&self) -> u64 {
        self.spooled
    }

    /// Starts a sample.
    ///
    /// # Errors
    /// An invalid key, a key already in this shard, or a sample still open.
    pub fn begin_sample(&mut self, key: &str) -> Result<()> {
        check_new_sample(&self.dest, self.cur.is_some(), &mut self.keys, key)?;
        self.cur = Some(SampleRec {
            key: key.to_owned(),
            members: Vec::new(),
            label: None,
        });
        Ok(())
    }

    fn spool(&mut self, ext: &str) -> Result<&mut Spool> {
        if !self.spools.contains_key(ext) {
            let path = self.dir.join(format!(
                "{TEMP_PREFIX}{}-{}.{}.spool",
                std::process::id(),
                self.file_name,
                self.spools.len()
            ));
            let file = File::create(&path).map_err(|e| FormatError::io(&path, e))?;
            self.spools.insert(
                ext.to_owned(),
                Spool {
                    path,
                    out: Some(BufWriter::with_capacity(1 << 20, file)),
                    len: 0,
                    npy: is_npy_field(ext).then(Vec::new),
                },
            );
        }
        Ok(self.spools.get_mut(ext).expect("inserted above"))
    }

    fn check_member(&self, ext: &str) -> Result<()> {
        validate_written_ext(ext)?;
        let cur = self.cur.as_ref().ok_or_else(|| FormatError::Limit {
            path: self.dest.clone(),
            what: format!("member .{ext} added outside a sample"),
        })?;
        if cur.members.iter().any(|m| m.ext == ext) {
            return Err(FormatError::InvalidName {
                name: format!("{}.{ext}", cur.key),
                reason: "two members of one sample share an extension",
            });
        }
        Ok(())
    }

    fn record(&mut self, ext: &str, offset: u64, size: u64, checksum: u64, label: Option<i64>) {
        self.spooled += size;
        if let Some(cur) = self.cur.as_mut() {
            if ext == "cls" {
                cur.label = label;
            }
            cur.members.push(MemberRec {
                ext: ext.to_owned(),
                offset,
                size,
                checksum,
            });
        }
    }

    /// Adds a member held in memory to the open sample.
    ///
    /// # Errors
    /// An invalid or repeated extension, no open sample, or an I/O error.
    pub fn add_member(&mut self, ext: &str, data: &[u8]) -> Result<()> {
        self.add_member_summed(ext, data, xxh3_64(data))
    }

    /// Adds a member held in memory whose checksum was computed beforehand;
    /// the same shard as [`H5ShardWriter::add_member`].
    ///
    /// # Errors
    /// As [`H5ShardWriter::add_member`].
    pub fn add_hashed_member(&mut self, ext: &str, data: &crate::hash::Hashed) -> Result<()> {
        self.add_member_summed(ext, data.bytes(), data.xxh3())
    }

    fn add_member_summed(&mut self, ext: &str, data: &[u8], sum: u64) -> Result<()> {
        self.check_member(ext)?;
        let label = parse_cls(ext, data);
        let sp = self.spool(ext)?;
        let offset = sp.len;
        note_npy(sp, data, data.len() as u64);
        let out = sp.out.as_mut().expect("open until finish");
        out.write_all(data)
            .map_err(|e| FormatError::io_at(&sp.path, offset, e))?;
        sp.len += data.len() as u64;
        self.record(ext, offset, data.len() as u64, sum, label);
        Ok(())
    }

    /// Adds a member streamed from `src`.
    ///
    /// # Errors
    /// As [`H5ShardWriter::add_member`]; a reader that ends early (naming
    /// `src.path`). The shard is then unusable and must be discarded.
    pub fn add_member_from(&mut self, ext: &str, src: crate::MemberSource<'_>) -> Result<()> {
        let crate::MemberSource {
            size,
            reader,
            path: source,
        } = src;
        self.check_member(ext)?;
        let sp = self.spool(ext)?;
        let offset = sp.len;
        let mut hasher = Xxh3::new();
        let mut first = true;
        let mut small = Vec::new();
        crate::shard::copy_exact(reader, size, source, |chunk| {
            if first {
                note_npy(sp, chunk, size);
                first = false;
            }
            if ext == "cls" && small.len() < 32 {
                small.extend_from_slice(&chunk[..chunk.len().min(32)]);
            }
            hasher.update(chunk);
            let out = sp.out.as_mut().expect("open until finish");
            out.write_all(chunk)
                .map_err(|e| FormatError::io_at(&sp.path, sp.len, e))?;
            sp.len += chunk.len() as u64;
            Ok(())
        })?;
        if first {
            note_npy(sp, &[], 0);
        }
        let label = parse_cls(ext, &small);
        self.record(ext, offset, size, hasher.digest(), label);
        Ok(())
    }

    /// Ends the open sample.
    ///
    /// # Errors
    /// No open sample, or a sample without members.
    pub fn end_sample(&mut self) -> Result<()> {
        let cur = (self.cur.take()).ok_or_else(|| FormatError::no_open_sample(&self.dest))?;
        if cur.members.is_empty() {
            return Err(FormatError::empty_sample(cur.key));
        }
        if self.samples.len() >= u32::MAX as usize - 1 {
            return Err(FormatError::Limit {
                path: self.dest.clone(),
                what: "shard exceeds the index's limits (2^32-1 samples)".into(),
            });
        }
        self.samples.push(cur);
        Ok(())
    }

    /// Writes a whole sample: its members in the order given. Names are
    /// checked before anything is written.
    ///
    /// # Errors
    /// As [`H5ShardWriter::begin_sample`] and [`H5ShardWriter::add_member`].
    pub fn write_sample(&mut self, key: &str, members: &[Member<'_>]) -> Result<()> {
        crate::shard::check_sample_names(key, members)?;
        self.begin_sample(key)?;
        for m in members {
            self.add_member(m.ext, m.data)?;
        }
        self.end_sample()
    }

    /// Writes the HDF5 file and its index under temporary names, syncs and
    /// renames them into place, and returns the shard's manifest entry.
    ///
    /// # Errors
    /// A sample still open; I/O and HDF5 library errors, naming the file.
    /// Nothing is left under the final names on error.
    pub fn finish(mut self) -> Result<ShardEntry> {
        if let Some(cur) = &self.cur {
            return Err(FormatError::Limit {
                path: self.dest.clone(),
                what: format!("finish with sample {:?} still open", cur.key),
            });
        }
        for sp in self.spools.values_mut() {
            if let Some(out) = sp.out.take() {
                let f = out
                    .into_inner()
                    .map_err(|e| FormatError::io(&sp.path, e.into_error()))?;
                drop(f);
            }
        }
        let dest = self.dest.clone();
        let h5_file = AtomicFile::create(&dest)?;
        let tmp = h5_file.tmp_path().to_path_buf();
        let addrs = self.write_h5(&tmp)?;
        // The HDF5 library wrote through its own descriptor: hash what is on disk.
        let (shard_len, shard_sum) = hash_file(&tmp)?;
        let mut index = IndexBuilder::new(Compression::H5);
        let mut fields: BTreeMap<String, FieldStats> = BTreeMap::new();
        let mut members = 0u64;
        for s in &self.samples {
            let list: Vec<(&str, u64, u64, u64)> = s
                .members
                .iter()
                .map(|m| {
                    let base = addrs.get(&m.ext).copied().unwrap_or(0);
                    (m.ext.as_str(), base + m.offset, m.size, m.checksum)
                })
                .collect();
            for m in &s.members {
                let f = fields.entry(m.ext.clone()).or_default();
                f.count += 1;
                f.bytes += m.size;
            }
            members += s.members.len() as u64;
            index.push_sample(&s.key, 0, 0, 0, 0, &list);
        }
        let index = index.to_bytes(shard_len, 0);
        let index_name = index_file_name(&self.file_name);
        crate::shard::commit_with_index(h5_file, &self.dir.join(&index_name), &index)?;
        Ok(ShardEntry {
            file: self.file_name.clone(),
            index: index_name,
            samples: self.samples.len() as u64,
            members,
            bytes: shard_len,
            tar_bytes: 0,
            compression: Compression::H5,
            index_xxh3: hex64(u64::from_le_bytes(
                index[index.len() - 8..].try_into().unwrap_or_default(),
            )),
            shard_xxh3: Some(hex64(shard_sum)),
            fields,
        })
    }

    /// Writes the HDF5 file at `path`; returns each field's data address.
    #[cfg(feature = "hdf5")]
    fn write_h5(&self, path: &Path) -> Result<BTreeMap<String, u64>> {
        use hdf5::types::VarLenUnicode;
        let e = |err: hdf5::Error| h5err(path, err);
        let n = self.samples.len();
        let file = hdf5::File::with_options()
            .with_fcpl(|p| p.obj_track_times(false))
            .create(path)
            .map_err(e)?;
        let keys: Vec<VarLenUnicode> = self
            .samples
            .iter()
            .map(|s| s.key.parse::<VarLenUnicode>().map_err(|x| h5err(path, x)))
            .collect::<Result<_>>()?;
        file.new_dataset_builder()
            .obj_track_times(false)
            .with_data(&keys[..])
            .create("keys")
            .map_err(e)?;
        drop(keys);
        let labels: Option<Vec<i64>> = self.samples.iter().map(|s| s.label).collect();
        if let Some(labels) = labels {
            file.new_dataset_builder()
                .obj_track_times(false)
                .with_data(&labels[..])
                .create("labels")
                .map_err(e)?;
        }
        let mut addrs = BTreeMap::new();
        let mut buf = vec![0u8; COPY_BUFFER];
        let fields_group = file.create_group("fields").map_err(e)?;
        for (ext, sp) in &self.spools {
            let g = fields_group.create_group(ext).map_err(e)?;
            let mut offsets = Vec::with_capacity(n + 1);
            let mut present = Vec::with_capacity(n);
            let mut at = 0u64;
            offsets.push(0u64);
            for s in &self.samples {
                match s.members.iter().find(|m| &m.ext == ext) {
                    Some(m) => {
                        at += m.size;
                        present.push(1u8);
                    }
                    None => present.push(0u8),
                }
                offsets.push(at);
            }
            g.new_dataset_builder()
                .obj_track_times(false)
                .with_data(&offsets[..])
                .create("offsets")
                .map_err(e)?;
            if present.contains(&0) {
                g.new_dataset_builder()
                    .obj_track_times(false)
                    .with_data(&present[..])
                    .create("present")
                    .map_err(e)?;
            }
            let len = usize::try_from(sp.len).map_err(|_| FormatError::Limit {
                path: path.to_path_buf(),
                what: format!("field {ext} of {} bytes", sp.len),
            })?;
            let data = g
                .new_dataset::<u8>()
                .obj_track_times(false)
                .no_chunk()
                .fill_time(hdf5::plist::dataset_create::FillTime::Never)
                .alloc_time(Some(hdf5::plist::dataset_create::AllocTime::Early))
                .shape(len)
                .create("data")
                .map_err(e)?;
            let mut src = File::open(&sp.path).map_err(|x| FormatError::io(&sp.path, x))?;
            let mut done = 0usize;
            while done < len {
                let want = (len - done).min(buf.len());
                src.read_exact(&mut buf[..want])
                    .map_err(|x| FormatError::io_at(&sp.path, done as u64, x))?;
                data.write_slice(&buf[..want], ndarray::s![done..done + want])
                    .map_err(e)?;
                done += want;
            }
            let addr = match data.offset() {
                Some(a) => a,
                None if len == 0 => 0,
                None => {
                    return Err(h5err(
                        path,
                        format!("field {ext}: the data dataset has no contiguous address"),
                    ));
                }
            };
            addrs.insert(ext.clone(), addr);
        }
        drop(fields_group);
        self.write_dense(&file, path, &mut buf)?;
        file.close().map_err(e)?;
        Ok(addrs)
    }

    #[cfg(not(feature = "hdf5"))]
    fn write_h5(&self, path: &Path) -> Result<BTreeMap<String, u64>> {
        Err(h5err(path, NO_HDF5))
    }

    /// `/dense/<ext>` for each `.npy` field whose members are all uint8 arrays of one 3-D shape.
    #[cfg(feature = "hdf5")]
    fn write_dense(&self, file: &hdf5::File, path: &Path, buf: &mut [u8]) -> Result<()> {
        use std::io::{Seek, SeekFrom};
        let e = |err: hdf5::Error| h5err(path, err);
        let n = self.samples.len();
        let mut group: Option<hdf5::Group> = None;
        for (ext, sp) in &self.spools {
            let Some(shapes) = &sp.npy else { continue };
            let Some(first) = shapes.first() else {
                continue;
            };
            if shapes.len() != n || shapes.iter().any(|s| s.shape != first.shape) {
                continue;
            }
            let [h, w, c] = first.shape;
            let g = match &group {
                Some(g) => g,
                None => group.insert(file.create_group("dense").map_err(e)?),
            };
            let ds = g
                .new_dataset::<u8>()
                .obj_track_times(false)
                .chunk((1, h, w, c))
                .shape((n, h, w, c))
                .create(ext.as_str())
                .map_err(e)?;
            let pixels = h * w * c;
            let mut src = File::open(&sp.path).map_err(|x| FormatError::io(&sp.path, x))?;
            let mut owned;
            let px: &mut [u8] = if pixels <= buf.len() {
                &mut buf[..pixels]
            } else {
                owned = vec![0u8; pixels];
                &mut owned
            };
            for (i, s) in self.samples.iter().enumerate() {
                let m = s
                    .members
                    .iter()
                    .find(|m| &m.ext == ext)
                    .expect("every sample has the field (shapes.len() == n)");
                let at = m.offset + shapes[i].header_len as u64;
                src.seek(SeekFrom::Start(at))
                    .and_then(|_| src.read_exact(px))
                    .map_err(|x| FormatError::io_at(&sp.path, at, x))?;
                let view =
                    ndarray::ArrayView3::from_shape((h, w, c), &*px).map_err(|x| h5err(path, x))?;
                ds.write_slice(view, ndarray::s![i, .., .., ..])
                    .map_err(e)?;
            }
        }
        Ok(())
    }
}

/// The message for `.h5` work in a build without the `hdf5` feature.
pub const NO_HDF5: &str = "this bale was built without HDF5 support; build it with `cargo build --release -p bale-cli --features hdf5` (needs the system HDF5 library: `apt-get install libhdf5-dev pkg-config`)";

/// A `.cls` member's integer value.
fn parse_cls(ext: &str, data: &[u8]) -> Option<i64> {
    if ext != "cls" {
        return None;
    }
    crate::name::parse_label(data)
}

/// Records a `.npy` member's shape on its spool (or stops tracking the field).
fn note_npy(sp: &mut Spool, head: &[u8], total: u64) {
    if let Some(shapes) = &mut sp.npy {
        match parse_npy_u8(head, total) {
            Some(s) if shapes.first().is_none_or(|f| f.shape == s.shape) => shapes.push(s),
            _ => sp.npy = None,
        }
    }
}

/// Length and xxh3-64 of a file, read sequentially.
fn hash_file(path: &Path) -> Result<(u64, u64)> {
    use std::io::BufRead;
    let f = crate::files::open_regular(path)?;
    let mut r = BufReader::with_capacity(COPY_BUFFER, f);
    let mut h = Xxh3::new();
    let mut len = 0u64;
    loop {
        let b = r.fill_buf().map_err(|e| FormatError::io_at(path, len, e))?;
        if b.is_empty() {
            break;
        }
        h.update(b);
        let n = b.len();
        len += n as u64;
        r.consume(n);
    }
    Ok((len, h.digest()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(shape: &[usize], fill: u8) -> Vec<u8> {
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        let shape_s = if dims.len() == 1 {
            format!("({},)", dims[0])
        } else {
            format!("({})", dims.join(", "))
        };
        let mut dict = format!("{{'descr': '|u1', 'fortran_order': False, 'shape': {shape_s}, }}");
        while (10 + dict.len() + 1) % 64 != 0 {
            dict.push(' ');
        }
        dict.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        let n: usize = shape.iter().product();
        out.extend((0..n).map(|i| (i as u8).wrapping_add(fill)));
        out
    }

    #[test]
    fn npy_headers_are_parsed_or_refused() {
        let a = npy(&[2, 3, 4], 0);
        let p = parse_npy_u8(&a, a.len() as u64).unwrap();
        assert_eq!(p.shape, [2, 3, 4]);
        assert_eq!(p.header_len + 24, a.len());
        // Wrong total length, rank 1, other dtype.
        assert!(parse_npy_u8(&a, a.len() as u64 + 1).is_none());
        let b = npy(&[24], 0);
        assert!(parse_npy_u8(&b, b.len() as u64).is_none());
        let f = String::from_utf8_lossy(&a)
            .replace("|u1", "<f4")
            .into_bytes();
        assert!(parse_npy_u8(&f, f.len() as u64).is_none());
        assert!(parse_npy_u8(b"\x93NUMPY", 6).is_none());
        assert!(parse_npy_u8(b"", 0).is_none());
    }

    #[cfg(not(feature = "hdf5"))]
    #[test]
    fn without_the_feature_creating_a_shard_says_how_to_build() {
        let d = tempfile::tempdir().unwrap();
        let err = H5ShardWriter::create(d.path(), "shard-000000.h5").unwrap_err();
        assert!(err.to_string().contains("--features hdf5"), "{err}");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[cfg(feature = "hdf5")]
    #[test]
    fn a_source_that_shrank_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let mut w = H5ShardWriter::create(d.path(), "shard-000000.h5").unwrap();
        w.begin_sample("a").unwrap();
        let mut short: &[u8] = b"only five";
        let e = w
            .add_member_from(
                "bin",
                crate::MemberSource {
                    size: 100,
                    reader: &mut short,
                    path: Path::new("shrunk.bin"),
                },
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("shrunk.bin") && e.contains("shrank"), "{e}");
        assert!(e.contains("9 of 100 bytes"), "{e}");
    }

    #[cfg(feature = "hdf5")]
    #[test]
    fn h5_shard_round_trips_through_the_index_and_is_deterministic() {
        use crate::read::ShardReader;
        let write = |dir: &Path| {
            let mut w = H5ShardWriter::create(dir, "shard-000000.h5").unwrap();
            for i in 0..5u8 {
                let img = npy(&[2, 3, 1], i);
                let cls = (i % 2).to_string();
                let txt = vec![b'x'; usize::from(i)];
                let mut m = vec![
                    Member {
                        ext: "npy",
                        data: &img,
                    },
                    Member {
                        ext: "cls",
                        data: cls.as_bytes(),
                    },
                ];
                if i != 3 {
                    m.push(Member {
                        ext: "txt",
                        data: &txt,
                    });
                }
                w.write_sample(&format!("k/{i}"), &m).unwrap();
            }
            assert!(
                w.write_sample(
                    "k/0",
                    &[Member {
                        ext: "a",
                        data: b""
                    }]
                )
                .is_err()
            );
            w.finish().unwrap()
        };
        let d1 = tempfile::tempdir().unwrap();
        let d2 = tempfile::tempdir().unwrap();
        let e1 = write(d1.path());
        let e2 = write(d2.path());
        assert_eq!(e1.shard_xxh3, e2.shard_xxh3, "same samples, same bytes");
        assert_eq!(e1.index_xxh3, e2.index_xxh3);
        assert_eq!(e1.compression, Compression::H5);
        let left: Vec<_> = fs::read_dir(d1.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            left.len(),
            2,
            "only the shard and its index remain: {left:?}"
        );
        let r = ShardReader::open(d1.path().join(&e1.file), d1.path().join(&e1.index)).unwrap();
        assert!(r.index().is_scattered());
        assert_eq!(r.index().compression(), Compression::H5);
        for i in 0..5u8 {
            let s = r.read(usize::from(i), true).unwrap();
            assert_eq!(s.key, format!("k/{i}"));
            assert_eq!(s.get("npy").unwrap(), &npy(&[2, 3, 1], i)[..]);
            assert_eq!(s.get("cls").unwrap(), (i % 2).to_string().as_bytes());
            let exts: Vec<&str> = s.members.iter().map(|m| m.0.as_str()).collect();
            if i == 3 {
                assert_eq!(exts, ["npy", "cls"], "member order is kept");
            } else {
                assert_eq!(s.get("txt").unwrap().len(), usize::from(i));
            }
        }
        // The HDF5 library reads the same data.
        let f = hdf5::File::open(d1.path().join(&e1.file)).unwrap();
        let labels: Vec<i64> = f.dataset("labels").unwrap().read_raw().unwrap();
        assert_eq!(labels, [0, 1, 0, 1, 0]);
        let present: Vec<u8> = f.dataset("fields/txt/present").unwrap().read_raw().unwrap();
        assert_eq!(present, [1, 1, 1, 0, 1]);
        let dense = f.dataset("dense/npy").unwrap();
        assert_eq!(dense.shape(), [5, 2, 3, 1]);
        let px: Vec<u8> = dense.read_raw().unwrap();
        assert_eq!(px[6..12], [1, 2, 3, 4, 5, 6]);
    }
}
