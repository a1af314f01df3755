//! Datasets in object storage: opening (the manifest and every index fetched
//! whole and checked exactly as local ones) and reading with ranged GETs,
//! optionally through the node-local cache.

use std::collections::HashMap;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use bale_format::MAX_MANIFEST_BYTES;
use bale_storage::{Cache, Chunks, Coalesce, Object, Pending, StorageError, Store};
use bytes::Bytes;

use super::shard::check_against_manifest;
use super::*;

/// A tar header block: what a scattered tar index's member is preceded by.
const TAR_BLOCK: u64 = 512;

/// Bytes of an index's fixed tables for `samples` and `members` (header,
/// sample records, member records, lookup table, footer), and the most its
/// key and extension strings may add: the bounds an index object's size
/// must lie in before it is downloaded. A `.tar.zst` shard's index is stored
/// compressed (one zstd frame): it has no lower bound but a frame header's,
/// and its decompressed size is bounded when it is opened.
fn index_bounds(samples: u64, members: u64, compression: Compression) -> (u64, u64) {
    let max = bale_format::index_len_max(samples, members);
    let min = if compression == Compression::Zstd {
        9
    } else {
        bale_format::index_len_min(samples, members)
    };
    (min, max)
}

/// Opens the dataset at `url`.
pub(super) fn open_remote(url: &str, options: DatasetOptions) -> Result<Dataset> {
    let store = Store::open(url, &options.storage)?;
    let dir = PathBuf::from(store.url());
    let manifest_obj = store.object(MANIFEST_NAME)?;
    let manifest_path = manifest_obj.path_buf();
    let bytes = match manifest_obj.get_sized(2, MAX_MANIFEST_BYTES, "manifest") {
        // The prefix exists, or at least nothing says otherwise: no manifest, no dataset.
        Err(StorageError::NotFound { detail, .. }) if !detail.contains("NoSuchBucket") => {
            return Err(FormatError::Incomplete { dir }.into());
        }
        r => r?,
    };
    let manifest = Manifest::from_slice(&bytes, &manifest_path)?;
    let largest = manifest.shards.iter().map(|s| s.bytes).max().unwrap_or(0);
    let cache = open_cache(&options, largest)?;
    let items = manifest
        .shards
        .iter()
        .map(|e| {
            let (min, max) = index_bounds(e.samples, e.members, e.compression);
            Ok((store.object(&e.index)?, min, max))
        })
        .collect::<Result<Vec<_>>>()?;
    let fetched = bale_storage::get_sized_many(&items, "index", options.max_requests.max(16))?;
    let mut shards = Vec::with_capacity(items.len());
    for (i, (got, (obj, _, _))) in fetched.into_iter().zip(&items).enumerate() {
        let entry = &manifest.shards[i];
        let index_path = obj.path_buf();
        let index = ShardIndex::from_bytes(got?.to_vec(), &index_path)?;
        check_against_manifest(&manifest_path, &manifest, i, &index, &index_path)?;
        let object = store.object(&entry.file)?.expect_size(entry.bytes);
        shards.push(Shard::in_bucket(object.path_buf(), index, object));
    }
    Ok(Dataset::assemble(
        dir,
        shards,
        manifest,
        options,
        Some(store),
        cache,
    ))
}

/// The node-local cache the options ask for, when they do: refused when
/// its limit cannot hold `largest`, the largest shard it would hold.
pub(super) fn open_cache(options: &DatasetOptions, largest: u64) -> Result<Option<Cache>> {
    let Some(c) = &options.cache else {
        return Ok(None);
    };
    let cache = Cache::open(c)?;
    if largest > c.limit {
        return Err(StorageError::Cache {
            path: c.dir.clone(),
            what: format!(
                "the limit of {} bytes cannot hold the dataset's largest shard ({largest} bytes), which a read fills in whole; raise the limit or read without a cache",
                c.limit
            ),
        }
        .into());
    }
    Ok(Some(cache))
}

impl Dataset {
    /// Whether the dataset is in object storage.
    pub fn is_remote(&self) -> bool {
        self.inner.store.is_some()
    }

    /// How batches of ranges become requests.
    pub(super) fn coalesce(&self) -> Coalesce {
        let o = &self.inner.options;
        Coalesce {
            gap: o.coalesce_gap,
            max_request: (16u64 << 20).max(o.read_chunk as u64),
            in_flight: o.max_requests,
        }
    }

    /// The object to read shard `s` from: `None` for a local shard, or a
    /// remote one served from the cache (its copy is then the shard's handle).
    pub(super) fn remote_object(&self, s: usize) -> Result<Option<&Object>> {
        let shard = &self.inner.shards[s];
        let Some(r) = &shard.remote else {
            return Ok(None);
        };
        if shard.handle.get().is_some() {
            return Ok(None);
        }
        if let Some(cache) = &self.inner.cache
            && !r.uncached.load(Ordering::Relaxed)
        {
            match self.fill_cache(cache, s, &r.object)? {
                Some(file) => {
                    shard.handle.get_or_init(|| Handle {
                        file: Some(file),
                        map: None,
                        regions: super::around::Regions::new(shard.index.shard_len()),
                        ahead: super::around::Ahead::default(),
                    });
                    return Ok(None);
                }
                None => r.uncached.store(true, Ordering::Relaxed),
            }
        }
        Ok(Some(&r.object))
    }

    /// Shard `s` from the cache, downloaded and checked first when missing;
    /// `None` when the cache cannot make room for it.
    fn fill_cache(&self, cache: &Cache, s: usize, object: &Object) -> Result<Option<File>> {
        let entry = &self.inner.manifest.shards[s];
        let index = &self.inner.shards[s].index;
        let key = format!(
            "{}\0{}\0{}",
            object.url(),
            entry.index_xxh3,
            entry.shard_xxh3.as_deref().unwrap_or("")
        );
        let ext = entry.compression.extension().trim_start_matches('.');
        let len = entry.bytes;
        let chunk = (self.read_chunk()).max(1 << 20);
        let ahead = self.inner.options.max_requests.clamp(1, 8);
        let path = object.path_buf();
        // Set when the copy is not the object the index describes (its
        // headers elsewhere): the shard was replaced since the open.
        let replaced = std::cell::Cell::new(false);
        let got = cache.get_or_fill(&key, ext, len, |file| {
            let mut h = bale_format::hash::Xxh3::new();
            for c in Chunks::new(object, 0..len, chunk, ahead) {
                let (at, bytes) = c?;
                file.write_all_at(&bytes, at)
                    .map_err(|e| StorageError::Cache {
                        path: cache.dir().to_path_buf(),
                        what: format!("cannot write the copy of {}: {e}", path.display()),
                    })?;
                h.update(&bytes);
            }
            let changed = |what| StorageError::Changed {
                url: object.url().to_owned(),
                what,
            };
            check_filled(file, &path, index, entry.shard_xxh3.as_deref(), h.digest())
                .map_err(changed)?;
            // With no checksum to check the copy by, its headers.
            if entry.shard_xxh3.is_none() && !index.has_checksums() {
                check_filled_heads(file, &path, index).map_err(|what| {
                    replaced.set(true);
                    changed(what)
                })?;
            }
            Ok(())
        });
        match got {
            Ok(got) => Ok(got.map(|c| c.file)),
            Err(_) if replaced.get() => Err(ReaderError::ShardReplaced { path }),
            Err(e) => Err(e.into()),
        }
    }

    /// Sample `local` of shard `s` from its object: one ranged GET (one per
    /// member for a scattered index, in one batch).
    pub(super) fn read_remote(&self, s: usize, local: usize, obj: &Object) -> Result<Sample> {
        let index = &self.inner.shards[s].index;
        let e = index.sample(local);
        if index.is_scattered() {
            // In a tar, each member's own header block comes along, to be
            // checked (an HDF5 file has none to check).
            let head = if index.compression() == Compression::H5 {
                0
            } else {
                TAR_BLOCK
            };
            let wants: Vec<(usize, Range<u64>)> = index
                .members(local)
                .map(|m| {
                    let from = m.offset.saturating_sub(head);
                    (0, from..m.offset.saturating_add(m.size))
                })
                .collect();
            let got = bale_storage::get_ranges(std::slice::from_ref(obj), &wants, self.coalesce())?;
            let mut buf = Vec::with_capacity(got.iter().map(Bytes::len).sum());
            let mut starts = Vec::with_capacity(got.len());
            for (b, m) in got.iter().zip(index.members(local)) {
                let b = if head == 0 {
                    &b[..]
                } else if m.offset >= head
                    && b.len() as u64 >= head
                    && bale_format::is_member_header(&b[..head as usize], m.size)
                {
                    &b[head as usize..]
                } else {
                    return Err(ReaderError::ShardReplaced {
                        path: self.inner.shards[s].path.clone(),
                    });
                };
                starts.push(buf.len());
                buf.extend_from_slice(b);
            }
            return self.build(s, local, &e, Buf::owned(buf), 0, Some(&starts));
        }
        let bytes = obj.get_range(e.file_offset..e.file_offset.saturating_add(e.file_len))?;
        self.sample_from_bytes(s, local, &e, bytes)
    }

    /// A sample from the bytes of its record (`file_len` bytes at `file_offset`).
    pub(super) fn sample_from_bytes(
        &self,
        s: usize,
        local: usize,
        e: &SampleEntry,
        bytes: Bytes,
    ) -> Result<Sample> {
        let shard = &self.inner.shards[s];
        match shard.index.compression() {
            Compression::Zstd => {
                let data = shard.decompress(e, &bytes)?;
                self.check_record(s, local, &data)?;
                self.build(s, local, e, Buf::owned(data), 0, None)
            }
            _ => {
                self.check_record(s, local, &bytes)?;
                self.build(s, local, e, Buf::Bytes(bytes), 0, None)
            }
        }
    }

    /// Checks that sample `local`'s record, read from its shard's object
    /// (and decompressed), begins with the member its index describes
    /// first ([`describes`]). The index was read at the open; the object is
    /// checked against its size at every answer, and against its version
    /// from its first answer on, but an object replaced before its first
    /// read by another of the same size would be read with the old index
    /// (a header or two parsed, against a round trip to the store).
    pub(super) fn check_record(&self, s: usize, local: usize, tar: &[u8]) -> Result<()> {
        if describes(&self.inner.shards[s].index, local, tar) {
            return Ok(());
        }
        Err(ReaderError::ShardReplaced {
            path: self.inner.shards[s].path.clone(),
        })
    }

    /// [`Dataset::get_batch`] for a dataset in object storage: every
    /// sample's range requested at once, neighbours coalesced.
    pub(super) fn get_batch_remote(&self, at: &[(usize, usize)]) -> Result<Vec<Sample>> {
        let mut objects: Vec<Object> = Vec::new();
        let mut object_of: HashMap<usize, usize> = HashMap::new();
        let mut wants = Vec::new();
        let mut want_of = Vec::with_capacity(at.len());
        for &(s, local) in at {
            let index = &self.inner.shards[s].index;
            match self.remote_object(s)? {
                Some(obj) if !index.is_scattered() => {
                    let k = *object_of.entry(s).or_insert_with(|| {
                        objects.push(obj.clone());
                        objects.len() - 1
                    });
                    let e = index.sample(local);
                    want_of.push(Some(wants.len()));
                    wants.push((k, e.file_offset..e.file_offset.saturating_add(e.file_len)));
                }
                _ => want_of.push(None),
            }
        }
        let got = if wants.is_empty() {
            Vec::new()
        } else {
            bale_storage::get_ranges(&objects, &wants, self.coalesce())?
        };
        at.iter()
            .zip(want_of)
            .map(|(&(s, local), w)| match w {
                Some(w) => {
                    let e = self.inner.shards[s].index.sample(local);
                    self.sample_from_bytes(s, local, &e, got[w].clone())
                }
                None => self.read_entry(s, local, Hint::Learnt),
            })
            .collect()
    }

    /// Starts the requests of a job of an epoch: each piece (a run of
    /// samples, or one sample) whose shard is read from its object.
    pub(crate) fn start_pieces(&self, pieces: &[(usize, usize, usize)]) -> StartedPieces {
        let mut objects: Vec<Object> = Vec::new();
        let mut object_of: HashMap<usize, usize> = HashMap::new();
        let mut wants = Vec::new();
        let mut want_of = Vec::with_capacity(pieces.len());
        for &(s, local, count) in pieces {
            let index = &self.inner.shards[s].index;
            let obj = match self.remote_object(s) {
                Ok(Some(o)) if !index.is_scattered() && count > 0 => o,
                _ => {
                    want_of.push(None);
                    continue;
                }
            };
            let k = *object_of.entry(s).or_insert_with(|| {
                objects.push(obj.clone());
                objects.len() - 1
            });
            let first = index.sample(local);
            let last = index.sample(local + count - 1);
            let end = last.file_offset.saturating_add(last.file_len);
            want_of.push(Some(wants.len()));
            wants.push((k, first.file_offset..end.max(first.file_offset)));
        }
        let pending = (!wants.is_empty())
            .then(|| bale_storage::start_ranges(objects, wants, self.coalesce()).ok())
            .flatten();
        StartedPieces { pending, want_of }
    }

    /// The samples of pieces started by [`Dataset::start_pieces`]. A failed
    /// request is retried sample by sample, so that an error names the
    /// sample it concerns and the others still arrive.
    pub(crate) fn finish_pieces(
        &self,
        pieces: &[(usize, usize, usize)],
        started: StartedPieces,
    ) -> Vec<Result<Sample>> {
        let got = started.pending.map(|p| p.wait().and_then(|r| r));
        let got = match got {
            Some(Ok(v)) => Some(v),
            _ => None,
        };
        let mut out = Vec::new();
        for (&(s, local, count), w) in pieces.iter().zip(started.want_of) {
            let bytes = match (&got, w) {
                (Some(v), Some(w)) => v.get(w).cloned(),
                _ => None,
            };
            match bytes {
                Some(b) if count == 1 => {
                    let e = self.inner.shards[s].index.sample(local);
                    out.push(self.sample_from_bytes(s, local, &e, b));
                }
                Some(b) => {
                    let start = self.inner.shards[s].index.sample(local).file_offset;
                    out.extend(self.samples_of_run(
                        s,
                        local,
                        count,
                        Buf::Bytes(b),
                        start,
                        false,
                        true,
                    ));
                }
                None => out.extend((local..local + count).map(|l| self.read_local(s, l, false))),
            }
        }
        out
    }
}

/// Requests started for the pieces of a job.
#[derive(Debug)]
pub(crate) struct StartedPieces {
    pending: Option<Pending<bale_storage::Result<Vec<Bytes>>>>,
    want_of: Vec<Option<usize>>,
}

/// Whether `tar`, sample `local`'s record as read (and decompressed),
/// begins with the member its index describes first: a regular file
/// whose data starts where the index says, of the size it gives, named
/// `<key>.<ext>` (after its pax or GNU long-name records, and a leading
/// `./`; a key that `bale index` renamed, `<key>~<n>`, is named by the
/// tar's key). Another object of the same size holds, at that offset,
/// another sample's data, or another sample's or member's header.
fn describes(index: &ShardIndex, local: usize, tar: &[u8]) -> bool {
    let Some(first) = index.members(local).min_by_key(|m| m.offset) else {
        return true;
    };
    let Some(entry) = bale_format::first_entry(tar) else {
        return false;
    };
    let at = first.offset.checked_sub(index.sample(local).tar_offset);
    if entry.kind != bale_format::EntryKind::File
        || Some(entry.data_offset) != at
        || entry.size != first.size
    {
        return false;
    }
    let Ok(name) = std::str::from_utf8(&entry.name) else {
        return false;
    };
    bale_format::split_member_name(bale_format::scan::normalize_member_name(name)).is_some_and(
        |(tar_key, ext)| {
            let key = index.key(local);
            ext == first.ext
                && (key == tar_key
                    || key
                        .strip_prefix(tar_key)
                        .and_then(|n| n.strip_prefix('~'))
                        .is_some_and(|n| n.parse::<u64>().is_ok()))
        },
    )
}

/// For a shard downloaded into the cache with no checksum to check it by:
/// each sample's record begins with the tar header its index describes
/// (the first sample's only for a `.tar.zst`, whose frames would all have
/// to be decompressed), as [`Dataset::check_record`] checks a record read
/// from the object; in a scattered tar, each member's data follows a file
/// header of its size ([`bale_format::is_member_header`]). Another object
/// of the same size fails at its first sample whose layout differs. An
/// HDF5 shard has no headers to check by.
fn check_filled_heads(
    file: &File,
    path: &Path,
    index: &ShardIndex,
) -> std::result::Result<(), String> {
    if index.is_scattered() {
        if index.compression() == Compression::H5 {
            return Ok(());
        }
        let mut block = [0u8; TAR_BLOCK as usize];
        for i in 0..index.len() {
            for m in index.members(i) {
                let read = m
                    .offset
                    .checked_sub(TAR_BLOCK)
                    .map(|at| file.read_exact_at(&mut block, at));
                if let Some(Err(e)) = read {
                    return Err(e.to_string());
                }
                if read.is_none() || !bale_format::is_member_header(&block, m.size) {
                    return Err(format!(
                        "at offset {} it does not hold the tar header of member {}.{} that its index describes: it was replaced or is damaged",
                        m.offset.saturating_sub(TAR_BLOCK),
                        index.key(i),
                        m.ext
                    ));
                }
            }
        }
        return Ok(());
    }
    let zstd = index.compression() == Compression::Zstd;
    let samples = if zstd {
        index.len().min(1)
    } else {
        index.len()
    };
    for i in 0..samples {
        let e = index.sample(i);
        let head = if zstd {
            let mut raw = vec![0u8; e.file_len as usize];
            file.read_exact_at(&mut raw, e.file_offset)
                .map_err(|e| e.to_string())?;
            decompress_frame(path, e.file_offset, &raw, e.tar_len, index.zstd_dict())
                .map_err(|e| e.to_string())?
        } else {
            // The record's headers, through the first member's own (pax
            // records and long names before it included), at most 1 MiB.
            let through = index
                .members(i)
                .map(|m| m.offset)
                .min()
                .map_or(512, |d| d.saturating_sub(e.tar_offset))
                .min(e.tar_len)
                .min(1 << 20);
            let mut head = vec![0u8; through as usize];
            file.read_exact_at(&mut head, e.file_offset)
                .map_err(|e| e.to_string())?;
            head
        };
        if !describes(index, i, &head) {
            return Err(format!(
                "at offset {} it does not hold the tar header of sample {:?} that its index describes: it was replaced or is damaged",
                e.file_offset,
                index.key(i)
            ));
        }
    }
    Ok(())
}

/// Checks a shard downloaded into the cache: against the manifest's
/// whole-file checksum when it records one, else every member against its
/// index checksum (when the index records them; else see
/// [`check_filled_heads`]). Returns what is wrong.
fn check_filled(
    file: &File,
    path: &Path,
    index: &ShardIndex,
    recorded: Option<&str>,
    digest: u64,
) -> std::result::Result<(), String> {
    if let Some(r) = recorded {
        let want = bale_format::parse_hex64(r).unwrap_or_default();
        if want != digest {
            return Err(format!(
                "the shard hashes to {}, the manifest records {r}: it was replaced or is damaged",
                bale_format::hex64(digest)
            ));
        }
        return Ok(());
    }
    if !index.has_checksums() {
        return Ok(());
    }
    for i in 0..index.len() {
        let e = index.sample(i);
        if index.is_scattered() {
            for m in index.members(i) {
                let mut buf = vec![0u8; m.size as usize];
                file.read_exact_at(&mut buf, m.offset)
                    .map_err(|e| e.to_string())?;
                verify_member(path, index.key(i), &m, &buf).map_err(|e| e.to_string())?;
            }
            continue;
        }
        let mut raw = vec![0u8; e.file_len as usize];
        file.read_exact_at(&mut raw, e.file_offset)
            .map_err(|e| e.to_string())?;
        let data = if index.compression() == Compression::Zstd {
            decompress_frame(path, e.file_offset, &raw, e.tar_len, index.zstd_dict())
                .map_err(|e| e.to_string())?
        } else {
            raw
        };
        for m in index.members(i) {
            let at = m.offset.saturating_sub(e.tar_offset) as usize;
            let bytes = data
                .get(at..at.saturating_add(m.size as usize))
                .ok_or_else(|| {
                    format!("member {}.{} lies outside its sample", index.key(i), m.ext)
                })?;
            verify_member(path, index.key(i), &m, bytes).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}
